"""A whole recurrent sequence as one CPU kernel: LSTM, GRU and RNN steps with the time loop inside.

Unrolled, an 80-step bidirectional LSTM is ~500 kernel calls per layer (the recurrent matmul, the gate tail and
the hidden-state output per step and direction) and as many VM allocations between them: on a CRNN the VM's own
calls took a third of the time. Here the input projection of every step stays one matmul outside (X·Wᵀ plus every
bias that is not inside a gate product, for all directions at once), and one kernel runs the recurrence:

    for (direction, batch) in parallel:          # both directions of a bidirectional layer on their own cores
        for step in time order (reversed for the backward direction):
            for a block of V hidden units:       # V = one or two vectors of the target
                gates[g][0:V] = xw[d, t, b, g, block]  (+ H_prev · R_gᵀ over the whole previous hidden state)
                the cell update of those V units (every gate of a unit is in its block: no barrier inside a step)

The recurrent weights are packed once (folded into the constants) as [direction, block, k, gate, V], so the
gate products read V contiguous floats per k and gate, and the 4 (LSTM) or 3 (GRU) gates x V lanes of a block
stay in registers as accumulators. sigmoid is 0.5 + 0.5·tanh(x/2), so both gates use the rational tanh that
FastMath's llvm lowering gives `T.tanh` (tuner/legalize/fast_math.py).
"""

from __future__ import annotations

from dataclasses import dataclass

# gates per cell, and the ONNX gate order of W, R and B: LSTM i o f c, GRU z r h, RNN one
GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}


@dataclass(frozen=True)
class SequenceShape:
    """What one sequence kernel is specialised for."""

    cell: str  # LSTM, GRU or RNN
    seq: int
    batch: int
    hidden: int
    reverse: tuple[bool, ...]  # per direction: does it run from the last step to the first
    block: int  # hidden units per block (V)
    linear_before_reset: bool = False  # GRU only
    dtype: str = "float32"
    # threads take the unit blocks of each step (a parallel launch per step), not the directions and batch rows:
    # for one direction and batch row, which would leave every other thread idle
    split_units: bool = False

    @property
    def directions(self) -> int:
        return len(self.reverse)

    @property
    def gates(self) -> int:
        return GATES[self.cell]


def unit_block(hidden: int, lanes: int) -> int:
    """Hidden units per block: two vectors where they divide the hidden size (8 accumulators of an LSTM keep both
    FMA pipes busy), else one, else the largest divisor of the hidden size up to one vector."""
    for v in (2 * lanes, lanes):
        if hidden % v == 0:
            return v
    return max(d for d in range(1, min(hidden, lanes) + 1) if hidden % d == 0)


ATTRS = {"tirx.is_scheduled": True, "tir.noalias": True, "op_pattern": 8}  # 8: opaque, fused with nothing


def sequence_kernel(shape: SequenceShape):
    """The PrimFunc of `shape`'s whole sequence, scheduled for CPU (`tirx.is_scheduled`: no schedule rule or
    tuner touches it).

    Parameters, in order: xw [directions, seq, batch, gates * hidden] (the input projection with its folded
    biases), the packed recurrent weights [directions, hidden / V, hidden, gates, V], the recurrent bias of the
    GRU's new gate when `linear_before_reset` [directions, hidden] (else absent), the initial hidden state
    [directions, batch, hidden] and, for LSTM, the initial cell state; then the outputs Y [seq, directions, batch,
    hidden], Y_h [directions, batch, hidden] and, for LSTM, Y_c."""
    assert shape.gates * shape.block * 4 < 1024, "accumulators of one block: a small buffer per task"
    assert not (shape.split_units and shape.cell == "GRU" and not shape.linear_before_reset), "z, r·H of all units"
    cell = _gru_reset_first if shape.cell == "GRU" and not shape.linear_before_reset else _CELLS[shape.cell]
    return cell(_Parts(shape))


class _Parts:
    """The index arithmetic and the gate products every cell shares, as TIR expressions and macros.

    Written without local variables: a Python assignment in TVMScript is a variable that LLVM kept in memory and
    reloaded after every store to the accumulators (0.2 -> 0.12 ms for an 80-step, 64-unit BiLSTM without them),
    so indices and the previous hidden state are written out where they are used."""

    def __init__(self, s: SequenceShape):
        from tvm.script import tirx as T

        S, B, H, G, D, V = s.seq, s.batch, s.hidden, s.gates, s.directions, s.block
        self.dims = (S, B, H, G, D, V, H // V, s.dtype)
        rev = [int(r) for r in s.reverse]

        def sig(x):
            return T.float32(0.5) + T.float32(0.5) * T.tanh(x * T.float32(0.5))

        def backward(db):  # 0 or 1: does task db's direction run from the last step to the first
            return rev[0] if D == 1 else T.Select(db // B == 0, rev[0], rev[1])

        def time_of(db, step):
            return step + backward(db) * (S - 1 - 2 * step)

        def prev_time(db, step):  # (step > 0)
            return step - 1 + backward(db) * (S + 1 - 2 * step)

        def unit(nb, v):
            return nb * V + v

        def h_prev(h0, y, db, step, u):
            """Unit u of the previous hidden state: the initial state at the first step, else Y of the step before."""
            return T.if_then_else(step == 0, h0[db // B, db % B, u], y[prev_time(db, step), db // B, db % B, u])

        def x_gate(xw, db, step, g, nb, v):
            return xw[db // B, time_of(db, step), db % B, g * H + unit(nb, v)]

        @T.macro
        def gates(acc, xw, rp, h0, y, db, step, nb, skip, count):
            """acc[g, 0:V] = x_g + H_prev · R_gᵀ over block nb's units for the first `count` gates (gate `skip`
            without its x part)."""
            for g in T.unroll(count):
                for v in T.vectorized(V):
                    acc[g, v] = T.if_then_else(g == skip, T.float32(0), x_gate(xw, db, step, g, nb, v))
            for k in range(H):
                for g in T.unroll(count):
                    for v in T.vectorized(V):
                        acc[g, v] = acc[g, v] + h_prev(h0, y, db, step, k) * rp[db // B, nb, k, g, v]

        @T.macro
        def last_hidden(y, yh, db):
            for u in range(H):
                yh[db // B, db % B, u] = y[time_of(db, S - 1), db // B, db % B, u]

        @T.macro
        def sequence(block, bufs, y, yh):
            """Every step of every task through `block(acc, bufs, db, step, nb)`, a cell's update of one unit
            block over the kernel's buffers `bufs`. A
            task (direction and batch row) keeps its accumulators in a local buffer, which TVM allocates from its
            workspace pool and LLVM holds in registers across the gate products."""
            if s.split_units:
                for db in range(D * B):
                    for step in range(S):
                        for nb in T.parallel(H // V):
                            acc = T.alloc_buffer((G, V), s.dtype, scope="local")
                            block(acc, bufs, db, step, nb)
                    last_hidden(y, yh, db)
            else:
                for db in T.parallel(D * B):
                    acc = T.alloc_buffer((G, V), s.dtype, scope="local")
                    for step in range(S):
                        for nb in range(H // V):
                            block(acc, bufs, db, step, nb)
                    last_hidden(y, yh, db)

        self.sig, self.time_of, self.unit, self.h_prev, self.x_gate = sig, time_of, unit, h_prev, x_gate
        self.gates, self.last_hidden, self.sequence = gates, last_hidden, sequence


def _lstm(k: _Parts):  # gates i o f c;  c = f*c + i*g(c~);  h = o*h(c)
    from tvm.script import tirx as T

    S, B, H, G, D, V, NB, dt = k.dims
    attrs = ATTRS

    @T.macro
    def block(acc, bufs, db, step, nb):
        xw, rp, h0, c0, y, yc = bufs
        k.gates(acc, xw, rp, h0, y, db, step, nb, -1, G)
        for v in T.vectorized(V):
            yc[db // B, db % B, k.unit(nb, v)] = k.sig(acc[2, v]) * T.if_then_else(
                step == 0, c0[db // B, db % B, k.unit(nb, v)], yc[db // B, db % B, k.unit(nb, v)]
            ) + k.sig(acc[0, v]) * T.tanh(acc[3, v])
        for v in T.vectorized(V):
            y[k.time_of(db, step), db // B, db % B, k.unit(nb, v)] = k.sig(acc[1, v]) * T.tanh(
                yc[db // B, db % B, k.unit(nb, v)]
            )

    @T.prim_func(private=True)
    def lstm(
        xw: T.Buffer((D, S, B, G * H), dt),
        rp: T.Buffer((D, NB, H, G, V), dt),
        h0: T.Buffer((D, B, H), dt),
        c0: T.Buffer((D, B, H), dt),
        y: T.Buffer((S, D, B, H), dt),
        yh: T.Buffer((D, B, H), dt),
        yc: T.Buffer((D, B, H), dt),
    ):
        T.func_attr(attrs)
        k.sequence(block, (xw, rp, h0, c0, y, yc), y, yh)

    return lstm


def _gru(k: _Parts):  # gates z r h, linear_before_reset: h~ = tanh(x_h + r*(H·R_hᵀ + Rb_h)); h = (1-z)*h~ + z*h
    from tvm.script import tirx as T

    S, B, H, G, D, V, NB, dt = k.dims
    attrs = ATTRS

    @T.macro
    def block(acc, bufs, db, step, nb):
        xw, rp, rbh, h0, y = bufs
        k.gates(acc, xw, rp, h0, y, db, step, nb, 2, G)
        for v in T.vectorized(V):
            acc[2, v] = T.tanh(
                k.x_gate(xw, db, step, 2, nb, v) + k.sig(acc[1, v]) * (acc[2, v] + rbh[db // B, k.unit(nb, v)])
            )
        for v in T.vectorized(V):
            y[k.time_of(db, step), db // B, db % B, k.unit(nb, v)] = acc[2, v] + k.sig(acc[0, v]) * (
                k.h_prev(h0, y, db, step, k.unit(nb, v)) - acc[2, v]
            )

    @T.prim_func(private=True)
    def gru(
        xw: T.Buffer((D, S, B, G * H), dt),
        rp: T.Buffer((D, NB, H, G, V), dt),
        rbh: T.Buffer((D, H), dt),
        h0: T.Buffer((D, B, H), dt),
        y: T.Buffer((S, D, B, H), dt),
        yh: T.Buffer((D, B, H), dt),
    ):
        T.func_attr(attrs)
        k.sequence(block, (xw, rp, rbh, h0, y), y, yh)

    return gru


def _gru_reset_first(k: _Parts):  # linear_before_reset=0: h~ = tanh(x_h + (r*h)·R_hᵀ), so a step has two phases
    from tvm.script import tirx as T

    S, B, H, G, D, V, NB, dt = k.dims
    attrs = ATTRS

    @T.prim_func(private=True)
    def gru_reset_first(
        xw: T.Buffer((D, S, B, G * H), dt),
        rp: T.Buffer((D, NB, H, G, V), dt),
        h0: T.Buffer((D, B, H), dt),
        y: T.Buffer((S, D, B, H), dt),
        yh: T.Buffer((D, B, H), dt),
    ):
        T.func_attr(attrs)
        for db in T.parallel(D * B):
            acc = T.alloc_buffer((G, V), dt, scope="local")
            zr = T.alloc_buffer((2, H), dt, scope="local")  # z, and r*h of every unit: the new gate reads all
            for step in range(S):
                for nb in range(NB):  # z and r over H_prev
                    k.gates(acc, xw, rp, h0, y, db, step, nb, -1, 2)
                    for v in T.vectorized(V):
                        zr[0, k.unit(nb, v)] = k.sig(acc[0, v])
                        zr[1, k.unit(nb, v)] = k.sig(acc[1, v]) * k.h_prev(h0, y, db, step, k.unit(nb, v))
                for nb in range(NB):  # the new gate over r*h, then the state
                    for v in T.vectorized(V):
                        acc[2, v] = k.x_gate(xw, db, step, 2, nb, v)
                    for j in range(H):
                        for v in T.vectorized(V):
                            acc[2, v] = acc[2, v] + zr[1, j] * rp[db // B, nb, j, 2, v]
                    for v in T.vectorized(V):
                        acc[2, v] = T.tanh(acc[2, v])
                    for v in T.vectorized(V):
                        y[k.time_of(db, step), db // B, db % B, k.unit(nb, v)] = acc[2, v] + zr[0, k.unit(nb, v)] * (
                            k.h_prev(h0, y, db, step, k.unit(nb, v)) - acc[2, v]
                        )
            k.last_hidden(y, yh, db)

    return gru_reset_first


def _rnn(k: _Parts):  # h = tanh(x + H·Rᵀ)
    from tvm.script import tirx as T

    S, B, H, G, D, V, NB, dt = k.dims
    attrs = ATTRS

    @T.macro
    def block(acc, bufs, db, step, nb):
        xw, rp, h0, y = bufs
        k.gates(acc, xw, rp, h0, y, db, step, nb, -1, G)
        for v in T.vectorized(V):
            y[k.time_of(db, step), db // B, db % B, k.unit(nb, v)] = T.tanh(acc[0, v])

    @T.prim_func(private=True)
    def rnn(
        xw: T.Buffer((D, S, B, G * H), dt),
        rp: T.Buffer((D, NB, H, G, V), dt),
        h0: T.Buffer((D, B, H), dt),
        y: T.Buffer((S, D, B, H), dt),
        yh: T.Buffer((D, B, H), dt),
    ):
        T.func_attr(attrs)
        k.sequence(block, (xw, rp, h0, y), y, yh)

    return rnn


_CELLS = {"LSTM": _lstm, "GRU": _gru, "RNN": _rnn}
