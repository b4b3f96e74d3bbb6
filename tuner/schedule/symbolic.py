"""Schedules for kernels over symbolic extents (packages for a range of shapes, `--input-shape x:1x8..512`).

MetaSchedule draws tile sizes from constant extents: a kernel over a symbolic extent gets no tiling, no parallel
loop and no vectors (a serial loop nest: MiniLM at 128 tokens ran 993 ms against 8.8 pinned). Here such a kernel
takes the schedule of its twin at constant extents (`bind_dims`, the first tune shape's sizes): the default
schedule (or a tuned record) of the twin, replayed on the symbolic kernel (`replay`): the same loop order,
parallel loops, vectors, inlining and packed weights. Tiles of a symbolic loop must split it exactly: a guarded
last tile inside the reduction kept the accumulators out of registers (MiniLM's 384x384 matmul at 256 rows:
1.4 ms guarded, 0.89 ms untiled, 0.50 ms static), and under `rfactor` gave wrong sums. So

    einsum with one symbolic spatial axis  -> padded to PAD on it (`pad_symbolic_einsums`): exact tiles
    conv (pad_einsum refuses it)           -> twin at a size with no small divisor on that axis
                                              (`untileable_values`): blocks go to the constant axes
    spatial blocks only                    -> `spatial_schedule`: constant axes innermost and in vectors
    anything else                          -> replayed; symbolic loops not split, never vectorised
"""

from __future__ import annotations

import re

_FREE_VAR = re.compile(r"^(\w+) = TypeVar\(", re.M)
_SCALAR_PARAM = re.compile(r"(\w+): T\.int64\b")
PAD = 16  # symbolic spatial axes of einsums are padded to a multiple of this: row blocks up to 16 stay exact


def symbolic_vars(func) -> list[str]:
    """The symbolic dimensions of a kernel: free in its buffer shapes, or passed as scalar parameters (FuseTIR
    passes a dimension that only appears inside an expression, `(w - 1) // 4 + 1`, that way)."""
    text = func.script()
    return _FREE_VAR.findall(text) + _SCALAR_PARAM.findall(_signature(text))


def _signature(text: str) -> str:
    start = re.search(r"def \w+\(", text).start()
    return text[start : text.index("):", start)]


def bind_dims(func, values: dict[str, int]):
    """The kernel at constant extents: its symbolic dimensions replaced by numbers, scalar dimension parameters
    dropped (TIR's Specialize binds buffer parameters only: this goes through TVMScript's text). The result is
    scheduled for its trace, never called."""
    import tvm
    from tvm.script import tirx as T

    text = func.script()
    names = symbolic_vars(func)
    text = "\n".join(line for line in text.splitlines() if not line.startswith("#") and not _FREE_VAR.match(line))
    for name in names:
        text = re.sub(rf"\b{re.escape(name)}: T\.int64(, |(?=\)))", "", text, count=1)  # a scalar parameter
        text = re.sub(rf"\b{re.escape(name)}\b", f"T.int64({int(values[name])})", text)
    text = re.sub(r'"(\([^"]*\)[^"]*)"', r"\1", text)  # TVMScript quotes a shape expression of a free variable
    return tvm.script.from_source(text, extra_vars={"T": T})


class _SymbolicReplay:
    """A schedule that replays a trace made at constant extents. On a symbolic loop a tile draw keeps the inner
    factors that divide the extent (a padded loop's, see `pad_symbolic_einsums`) and puts the rest of the extent
    in the outer loop: an exact split, no guard."""

    def __init__(self, sch):
        self._sch = sch

    def __getattr__(self, name):
        return getattr(self._sch, name)

    def get_output_blocks(self, block=None, scope_block=None):  # TVM 0.27 prints the argument as `block=`
        return self._sch.get_output_blocks(scope_block if scope_block is not None else block)

    def sample_perfect_tile(self, loop, n, max_innermost_factor=16, decision=None):
        import tvm

        extent = self._sch.get(loop).extent
        if decision is not None and not isinstance(extent, tvm.tirx.IntImm):
            # the innermost factors whose product provably divides the extent (a padded loop's): an exact split
            kept, inner = [], 1
            for d in reversed([int(x) for x in decision[1:]]):
                d = d if _divides(inner * d, extent) else 1
                kept.append(d)
                inner *= d
            return [None, *kept[::-1]]
        return self._sch.sample_perfect_tile(loop, n=n, max_innermost_factor=max_innermost_factor, decision=decision)

    def split(self, loop, factors, preserve_unit_iters=True, disable_predication=False):
        """A split by numbers (a row kernel's vector lanes) of a symbolic loop: exact, or not split. A guarded
        split under `rfactor` gave wrong sums (MiniLM's softmax at lengths that 4 does not divide)."""
        import tvm

        extent = self._sch.get(loop).extent
        if not isinstance(extent, tvm.tirx.IntImm) and all(isinstance(f, int) or f is None for f in factors):
            known = 1
            for f in factors:
                known *= f if isinstance(f, int) else 1
            if not _divides(known, extent):
                factors = [None if f is None else 1 for f in factors]
        return self._sch.split(
            loop, factors=factors, preserve_unit_iters=preserve_unit_iters, disable_predication=disable_predication
        )

    def vectorize(self, loop):
        """Vectors need a constant length: a symbolic loop stays a loop (LLVM may still vectorise it)."""
        import tvm

        if isinstance(self._sch.get(loop).extent, tvm.tirx.IntImm):
            self._sch.vectorize(loop)


def _divides(k: int, extent) -> bool:
    import tvm
    from tvm.sym.analyzer import Analyzer

    return k == 1 or Analyzer().can_prove_equal(tvm.tirx.floormod(extent, k), 0)


def replay(trace, func):
    """`trace` (post-processing included) applied to `func`; a `tvm.s_tir.Schedule`. Raises when a step does not
    apply (a loop the trace vectorises is symbolic here, say)."""
    import tvm
    from tvm.s_tir import Schedule
    from tvm.script import tirx as T

    sch = Schedule(func)
    code = "\n".join(trace.as_python(remove_postproc=False))
    # the trace's own printout (TVM's Trace.as_python) of a schedule made here: the names it uses are these
    exec(compile(code, "<trace>", "exec"), {"sch": _SymbolicReplay(sch), "T": T, "tvm": tvm})  # noqa: S102
    return sch


def pad_symbolic_einsums(func, multiple: int = PAD):
    """The kernel with every einsum (matmul, conv, ...) over a symbolic spatial axis computed on that axis rounded
    up to `multiple` (`Schedule.pad_einsum`: the inputs copied into zero-padded buffers, the result cut back).
    Returns (func, multiple); (func, 1) where nothing was padded, (func, 0) where such an einsum would not pad
    (a conv: it reads `x[h + rh]`, and pad_einsum takes point accesses only)."""
    import tvm
    from tvm.s_tir import Schedule

    sch, padded, refused = Schedule(func), False, False
    for block in _blocks(sch, func):
        stmt = sch.get(block)
        iters = stmt.iter_vars
        sym = [not isinstance(iv.dom.extent, tvm.tirx.IntImm) and int(iv.iter_type) == 0 for iv in iters]
        # a product of two operands reduced (a matmul, a conv) with one symbolic spatial axis (rows, width): with
        # two (attention scores, n x n) the padded kernel ran 10x slower than the unpadded one (4.4 / 0.43 ms)
        if sum(sym) != 1 or all(int(iv.iter_type) == 0 for iv in iters) or len(stmt.reads) < 2:
            continue
        try:
            sch.pad_einsum(block, [multiple if s else 1 for s in sym])
            padded = True
        except Exception:  # not a point-access einsum (a conv, softmax): left unpadded
            refused = True
    return (sch.mod["main"], multiple) if padded else (func, 0 if refused else 1)


def _blocks(sch, func):
    out = []
    for name in re.findall(r'^\s*with T\.sblock\("([^"]+)"\)', func.script(), re.M):  # not "# ... root"
        try:
            out.append(sch.get_sblock(name))
        except Exception:
            continue
    return out


def spatial_schedule(func, lanes: int):
    """A kernel of spatial blocks only (element-wise, transposes, layout changes) over a symbolic extent: every
    block inlined into the last; its loops over constant extents innermost (a transpose whose output's last axis
    is symbolic writes with a stride instead), the innermost vectorised by a divisor of its extent up to 4
    vectors; the symbolic ones fused and parallel. Replaying the static schedule fused a symbolic axis into the
    vector loop, which then could not be a vector (PP-OCRv4's recognizer, hard-swish between two transposes at
    width 480: 0.75 ms a call, 0.06 with this). None when the kernel has a reduction or will not take it."""
    import tvm
    from tvm.s_tir import Schedule

    sch = Schedule(func)
    blocks = _blocks(sch, func)
    if not blocks or any(int(iv.iter_type) != 0 for b in blocks for iv in sch.get(b).iter_vars):
        return None
    try:
        for block in blocks[:-1]:
            sch.compute_inline(block)
        out = blocks[-1]
        loops = sch.get_loops(out)
        const = [lp for lp in loops if isinstance(sch.get(lp).extent, tvm.tirx.IntImm)]
        outer = [lp for lp in loops if not isinstance(sch.get(lp).extent, tvm.tirx.IntImm)]
        if not outer:
            return None  # a static kernel: the default schedule's
        sch.reorder(*outer, *const)
        row = sch.fuse(*outer) if len(outer) > 1 else outer[0]
        sch.parallel(row)
        if const:  # vectors along the innermost axis alone: across an axis boundary each lane indexes apart
            inner = const[-1]
            extent = int(sch.get(inner).extent)
            width = max((w for w in range(1, min(extent, 4 * lanes) + 1) if extent % w == 0), default=1)
            if width > 1:
                sch.vectorize(sch.split(inner, [None, width])[1])
    except Exception:  # a producer that does not inline: left to the replay
        return None
    return sch


def static_schedule(static, target, lanes: int, db=None):
    """The schedule of a kernel at constant extents: its tuned record, else the default schedule (None if neither)."""
    import tvm

    from tuner.schedule.default_schedule import heuristic_schedule

    if db is not None:
        sch = db.query_schedule(tvm.IRModule({"main": static}), target, workload_name="main")
        if sch is not None:
            return sch, "tuned"
    sch = heuristic_schedule(static, target, lanes)
    return (sch, "default") if sch is not None else (None, None)


def untileable_values(func, values: dict[str, int], window: int = 48) -> dict[str, int]:
    """Sizes near `values` at which every symbolic loop of the kernel has no divisor from 2 to 16. The replay
    cannot block a symbolic loop that is not padded (its tile would need a guard); at such sizes the default
    schedule does not block it either and puts its register blocks on the constant axes (a conv's height,
    channels) instead of losing them. `values` itself when no size in the window does that."""
    import tvm
    from tvm.s_tir import Schedule
    from tvm.sym.analyzer import Analyzer

    from tuner.core.ir import free_vars

    sch = Schedule(func)
    extents = [
        sch.get(lp).extent
        for b in _blocks(sch, func)
        for lp in sch.get_loops(b)
        if not isinstance(sch.get(lp).extent, tvm.tirx.IntImm)
    ]
    names = sorted(values)
    if len(names) != 1 or not extents:  # one symbolic size: search it; several: leave them
        return values
    var_of = {v.name: v for e in extents for v in free_vars(e)}
    if names[0] not in var_of:
        return values
    target = values[names[0]]
    for delta in sorted(range(-window, window + 1), key=abs):
        size = target + delta
        if size < 1:
            continue
        analyzer = Analyzer()
        analyzer.bind(var_of[names[0]], size)
        got = [analyzer.simplify(e) for e in extents]
        if all(hasattr(g, "value") and _no_small_divisor(int(g.value)) for g in got):
            return {names[0]: size}
    return values


def _no_small_divisor(n: int) -> bool:
    return n > 16 and all(n % d for d in range(2, 17))


def schedule_symbolic(mod, target_spec, values: dict[str, int], db=None, skip=frozenset()) -> tuple[object, dict]:
    """(module, {kernel: "tuned" | "default"}): every unscheduled kernel over symbolic extents scheduled as its
    specialisation at `values` ({dimension: size}) is; kernels whose schedule does not replay stay as they are
    (said in the plan as unscheduled)."""
    import tvm

    from tuner.core.target import vector_lanes

    target, lanes = target_spec.tvm_target(), vector_lanes(target_spec)
    out, how = mod, {}
    for gv, func in mod.functions.items():
        if not isinstance(func, tvm.tirx.PrimFunc) or "tirx.is_scheduled" in (func.attrs or {}):
            continue
        names = symbolic_vars(func)
        if gv.name_hint in skip or not names or any(n not in values for n in names):
            continue
        spatial = spatial_schedule(func, lanes)
        if spatial is not None:
            out = out.clone() if out is mod else out
            out[gv] = spatial.mod["main"].with_attr("tirx.is_scheduled", True)
            how[gv.name_hint] = "default"
            continue
        try:
            padded_func, padded = pad_symbolic_einsums(func)
            # a conv's symbolic axis takes no register blocks: at the twin's size, nor should its schedule
            twin = untileable_values(func, values) if padded == 0 else values
            # a tuned record is of the unpadded kernel: it schedules only what is not padded
            sch, source = static_schedule(bind_dims(padded_func, twin), target, lanes, db if padded <= 1 else None)
            if sch is None:
                continue
            scheduled = replay(sch.trace, padded_func).mod["main"].with_attr("tirx.is_scheduled", True)
        except Exception:  # a schedule that needs constant extents (a vectorised symbolic loop): left as lowered
            continue
        out = out.clone() if out is mod else out
        out[gv] = scheduled
        how[gv.name_hint] = source
    return out, how
