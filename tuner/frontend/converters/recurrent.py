"""ONNX LSTM, GRU and RNN, unrolled over time into Relax (TVM 0.27's importer has none of them).

With static shapes the time loop is unrolled: the input projection of every step is one MatMul over the whole
sequence (X·Wᵀ + biases, [seq, batch, gates·hidden]); each step then adds H·Rᵀ and runs the gate tail, which
fusion turns into one matmul kernel with its element-wise epilogue per step. Forward, reverse and bidirectional;
initial states; peepholes; `clip`; `layout` 0 and 1; GRU's `linear_before_reset`; the activation functions of
the ONNX spec with their alpha/beta. `sequence_lens` shorter than the sequence is supported in the forward
direction (states hold and outputs are zero past each length); reverse directions need full-length sequences.
Limits: `input_forget` (LSTM) is refused; the unrolled graph grows with the sequence length (fine for the tens to
hundreds of steps of speech and OCR models, not for thousands).

For CPU targets (`sequence_kernels(lanes)` around the import) the common cells become one kernel for the whole
sequence instead (recurrent_sequence.py); unrolled remain GPU targets, float16, non-default activations, `clip`,
peepholes and `sequence_lens` shorter than the sequence.
"""

from __future__ import annotations

import contextlib
import contextvars

from tuner.core.errors import TunerError

# fp32 lanes of the CPU target's vectors while importing for one; None: unroll every recurrent op
_SEQUENCE_LANES: contextvars.ContextVar[int | None] = contextvars.ContextVar("sequence_lanes", default=None)


@contextlib.contextmanager
def sequence_kernels(lanes: int | None):
    """Within: recurrent ops that one sequence kernel can run become that kernel, vectorised `lanes` wide."""
    token = _SEQUENCE_LANES.set(lanes)
    try:
        yield
    finally:
        _SEQUENCE_LANES.reset(token)


def _relax():
    from tvm import relax

    return relax


def _const(value, dtype):
    import numpy as np

    return _relax().const(np.array(value, dtype=dtype))


def _activation(bb, name: str, x, alpha, beta, dtype):
    """The ONNX RNN activation `name` (Sigmoid, Tanh, Relu, ...) applied to x."""
    op = _relax().op
    name = name.decode() if isinstance(name, bytes) else name
    key = name.lower()
    if key == "sigmoid":
        return bb.emit(op.sigmoid(x))
    if key == "tanh":
        return bb.emit(op.tanh(x))
    if key == "relu":
        return bb.emit(op.nn.relu(x))
    if key == "hardsigmoid":
        a, b = (0.2 if alpha is None else alpha), (0.5 if beta is None else beta)
        lin = bb.emit(op.add(op.multiply(x, _const(a, dtype)), _const(b, dtype)))
        return bb.emit(op.clip(lin, 0.0, 1.0))
    if key == "leakyrelu":
        return bb.emit(op.nn.leakyrelu(x, 0.01 if alpha is None else alpha))
    if key == "affine":
        return bb.emit(op.add(op.multiply(x, _const(alpha, dtype)), _const(beta, dtype)))
    if key == "scaledtanh":
        return bb.emit(op.multiply(_const(alpha, dtype), op.tanh(op.multiply(x, _const(beta, dtype)))))
    if key == "thresholdedrelu":
        t = 1.0 if alpha is None else alpha
        return bb.emit(op.where(op.greater(x, _const(t, dtype)), x, _const(0.0, dtype)))
    if key == "elu":
        a = 1.0 if alpha is None else alpha
        neg = op.multiply(_const(a, dtype), op.subtract(op.exp(x), _const(1.0, dtype)))
        return bb.emit(op.where(op.greater(x, _const(0.0, dtype)), x, neg))
    if key == "softsign":
        return bb.emit(op.divide(x, op.add(_const(1.0, dtype), op.abs(x))))
    if key == "softplus":
        return bb.emit(op.log(op.add(op.exp(x), _const(1.0, dtype))))
    raise TunerError(f"recurrent activation {name!r} is not supported", "use one of the ONNX spec's activations")


# activations that consume an alpha and a beta from activation_alpha / activation_beta, in order
_TAKES_ALPHA = {"leakyrelu", "thresholdedrelu", "elu", "hardsigmoid", "affine", "scaledtanh"}
_TAKES_BETA = {"hardsigmoid", "affine", "scaledtanh"}


def _activations(attrs, defaults: list[str], num_dir: int):
    """[(name, alpha, beta)] * (len(defaults) * num_dir), from the node's attributes."""
    names = [a.decode() if isinstance(a, bytes) else a for a in attrs.get("activations", ())]
    names = names or defaults * num_dir
    if len(names) != len(defaults) * num_dir:
        raise TunerError(f"activations lists {len(names)} functions; expected {len(defaults) * num_dir}")
    alphas, betas = list(attrs.get("activation_alpha", ())), list(attrs.get("activation_beta", ()))
    out = []
    for n in names:
        a = alphas.pop(0) if n.lower() in _TAKES_ALPHA and alphas else None
        b = betas.pop(0) if n.lower() in _TAKES_BETA and betas else None
        out.append((n, a, b))
    return out


def _shape(expr):
    return [int(d) for d in expr.ty.shape.values]


def _static_int_list(expr):
    """The values of a constant integer tensor, or None when it is computed at run time."""
    import tvm

    if isinstance(expr, tvm.ir.expr.Constant):  # TVM 0.27's Relax constant
        data = getattr(expr, "data", None)
        data = data if data is not None else expr.value
        return [int(v) for v in data.numpy().ravel()]
    return None


class _Cell:
    """What every recurrent op shares: inputs in [seq, batch, ...] layout, per-direction weights, the time loop."""

    gates = 1
    outputs_state = False  # LSTM's Y_c

    def __init__(self, bb, inputs, attrs, op_name):
        relax = _relax()
        self.bb, self.op, self.op_name = bb, relax.op, op_name
        self.x, self.w, self.r = inputs[0], inputs[1], inputs[2]
        get = lambda i: inputs[i] if len(inputs) > i and inputs[i] is not None else None  # noqa: E731
        self.b, self.seq_lens, self.init_h = get(3), get(4), get(5)
        self.layout = int(attrs.get("layout", 0))
        if self.layout:
            self.x = bb.emit(self.op.permute_dims(self.x, [1, 0, 2]))
        self.seq, self.batch, _ = _shape(self.x)
        self.dtype = str(self.x.ty.dtype)
        direction = attrs.get("direction", b"forward")
        self.direction = direction.decode() if isinstance(direction, bytes) else direction
        self.num_dir = 2 if self.direction == "bidirectional" else 1
        self.hidden = int(attrs.get("hidden_size", _shape(self.r)[-1]))
        self.clip = attrs.get("clip")
        self.lengths = None
        if self.seq_lens is not None:
            known = _static_int_list(self.seq_lens)
            if known is None or any(v != self.seq for v in known):
                if self.direction != "forward":
                    raise TunerError(
                        f"{op_name}: sequence_lens shorter than the sequence in a {self.direction} direction is "
                        "not supported (reverse steps start at each sequence's own end)",
                        "pad the sequences to full length, or run the recurrent part in the forward direction",
                    )
                self.lengths = bb.emit(self.op.reshape(self.op.astype(self.seq_lens, "int32"), [self.batch, 1]))

    def direction_weights(self, d):
        """W [gates*H, in], R [gates*H, H] and the summed bias [gates*H] (or None) of direction d."""
        op, bb = self.op, self.bb
        w = bb.emit(op.squeeze(op.strided_slice(self.w, [0], [d], [d + 1]), [0]))
        r = bb.emit(op.squeeze(op.strided_slice(self.r, [0], [d], [d + 1]), [0]))
        bias = None
        if self.b is not None:
            b = bb.emit(op.squeeze(op.strided_slice(self.b, [0], [d], [d + 1]), [0]))
            g = self.gates * self.hidden
            wb = op.strided_slice(b, [0], [0], [g])
            rb = op.strided_slice(b, [0], [g], [2 * g])
            bias = (bb.emit(wb), bb.emit(rb))
        return w, r, bias

    def initial(self, state, d):
        if state is None:
            return self.bb.emit(self.op.zeros((self.batch, self.hidden), self.dtype))
        return self.bb.emit(self.op.squeeze(self.op.strided_slice(state, [0], [d], [d + 1]), [0]))

    def gate(self, x, k, name_alpha_beta):
        """Gate pre-activation x (clipped when `clip` is set) through its activation."""
        if self.clip is not None:
            x = self.bb.emit(self.op.clip(x, -float(self.clip), float(self.clip)))
        name, a, b = name_alpha_beta
        return _activation(self.bb, name, x, a, b, self.dtype)

    def split(self, x, n):
        """n equal slices of the last axis, as strided slices (injective: they fuse into the gate tail, where a
        tuple-valued split would end the kernel)."""
        size = _shape(x)[-1] // n
        axis = len(_shape(x)) - 1
        return [self.bb.emit(self.op.strided_slice(x, [axis], [k * size], [(k + 1) * size])) for k in range(n)]

    def run(self):
        op, bb = self.op, self.bb
        ys, hs, cs = [], [], []
        for d in range(self.num_dir):
            reverse = self.direction == "reverse" or d == 1
            w, r, bias = self.direction_weights(d)
            # every step's input projection at once: [seq, batch, gates*H]
            xw = op.matmul(self.x, op.permute_dims(w, [1, 0]))
            if bias is not None:
                xw = op.add(xw, bias[0])
            xw = bb.emit(xw)
            rt = bb.emit(op.permute_dims(r, [1, 0]))
            state = self.start(d)
            outs = [None] * self.seq
            for t in reversed(range(self.seq)) if reverse else range(self.seq):
                xt = bb.emit(op.squeeze(op.strided_slice(xw, [0], [t], [t + 1]), [0]))
                new = self.step(xt, rt, bias[1] if bias is not None else None, state, d)
                if self.lengths is not None:  # past its length a sequence keeps its state and outputs zeros
                    alive = bb.emit(op.less(_const(t, "int32"), self.lengths))
                    outs[t] = bb.emit(op.where(alive, new[0], op.zeros((self.batch, self.hidden), self.dtype)))
                    new = [bb.emit(op.where(alive, n, s)) for n, s in zip(new, state)]
                else:
                    outs[t] = new[0]
                state = new
            ys.append(bb.emit(op.stack(outs, axis=0)))  # [seq, batch, H]
            hs.append(state[0])
            if self.outputs_state:
                cs.append(state[1])
        y = bb.emit(op.stack(ys, axis=1))  # [seq, num_dir, batch, H]
        if self.layout:
            y = bb.emit(op.permute_dims(y, [2, 0, 1, 3]))  # [batch, seq, num_dir, H]
        outs = [y] + [self.final(s) for s in [hs] + ([cs] if self.outputs_state else [])]
        return _relax().Tuple(outs)

    def final(self, states):
        state = self.bb.emit(self.op.stack(states, axis=0))  # [num_dir, batch, H]
        return self.bb.emit(self.op.permute_dims(state, [1, 0, 2])) if self.layout else state

    # the activations each cell's sequence kernel computes (ONNX's defaults)
    sequence_activations: tuple[str, ...] = ()

    def sequence_kernel_ok(self) -> bool:
        """Can one sequence kernel run this op? Default activations, no clip, peepholes or short sequences."""
        defaults = [a.lower() for a in self.sequence_activations] * self.num_dir
        acts = [(n.decode() if isinstance(n, bytes) else n).lower() for n, a, b in self.acts]
        plain = all(a is None and b is None for _, a, b in self.acts)
        return acts == defaults and plain and self.clip is None and self.lengths is None and self.dtype == "float32"

    def recurrent_bias_outside(self):
        """Recurrent-bias gates that stay inside a gate product (GRU's new gate with linear_before_reset)."""
        return ()

    def run_sequence(self, lanes: int):
        """The op as one sequence kernel: xw = X·Wᵀ + folded biases (all directions in one batched matmul), the
        recurrent weights packed per block of units (constants fold at build time), then the kernel."""
        from tuner.frontend.converters.recurrent_sequence import SequenceShape, sequence_kernel, unit_block

        relax, op, bb = _relax(), self.op, self.bb
        D, H, G, S, B = self.num_dir, self.hidden, self.gates, self.seq, self.batch
        in_size = _shape(self.w)[-1]
        V = unit_block(H, lanes)
        reverse = tuple(self.direction == "reverse" or d == 1 for d in range(D))
        lbr = bool(getattr(self, "linear_before_reset", False))
        # one direction and batch row: split each step's units over the threads (GRU without linear_before_reset
        # needs every unit's r·H before its new gate, so it stays on one thread)
        split = D * B == 1 and not (self.op_name == "GRU" and not lbr)
        shape = SequenceShape(self.op_name, S, B, H, reverse, V, lbr, split_units=split)
        # one batched matmul, a batch per direction: [1, seq*batch, in] x [D, in, G*H] -> [D, seq*batch, G*H]
        # (as one [in, D*G*H] matmul it ran 4-5x slower: 2.9 against 0.5 ms on the 80-step BiLSTM pair)
        w_t = bb.emit(op.permute_dims(self.w, [0, 2, 1]))  # [D, in, G*H]
        xw = op.matmul(op.reshape(self.x, [1, S * B, in_size]), w_t)
        inner = self.recurrent_bias_outside()
        if self.b is not None:
            wb = op.strided_slice(self.b, [1], [0], [G * H])
            rb = op.strided_slice(self.b, [1], [G * H], [2 * G * H])
            if inner:  # those gates' recurrent bias is added inside the kernel, not here
                keep = [0.0 if g in inner else 1.0 for g in range(G) for _ in range(H)]
                rb = op.multiply(rb, _const(keep, self.dtype))
            xw = op.add(xw, op.reshape(op.add(wb, rb), [D, 1, G * H]))
        xw = bb.emit(op.reshape(xw, [D, S, B, G * H]))
        rp = op.reshape(self.r, [D, G, H // V, V, H])  # R[d, g*H + nb*V + v, k] -> [d, nb, k, g, v]
        args = [xw, bb.emit(op.permute_dims(rp, [0, 2, 4, 1, 3]))]
        if inner:
            if self.b is None:
                args.append(bb.emit(op.zeros((D, H), self.dtype)))
            else:
                g = inner[0]
                args.append(bb.emit(op.strided_slice(self.b, [1], [(G + g) * H], [(G + g + 1) * H])))
        states = [self.init_h] + ([self.init_c] if self.outputs_state else [])
        for st in states:  # [D, B, H] ([B, D, H] with layout 1)
            if st is None:
                st = op.zeros((D, B, H), self.dtype)
            elif self.layout:
                st = op.permute_dims(st, [1, 0, 2])
            args.append(bb.emit(st))
        n_states = len(states)
        outs = [relax.TensorType((S, D, B, H), self.dtype)] + [relax.TensorType((D, B, H), self.dtype)] * n_states
        kernel = bb.add_func(sequence_kernel(shape), f"{self.op_name.lower()}_sequence")
        result = bb.emit(relax.call_tir(kernel, relax.Tuple(args), outs))
        y = bb.emit(relax.TupleGetItem(result, 0))
        finals = [bb.emit(relax.TupleGetItem(result, 1 + k)) for k in range(n_states)]
        if self.layout:
            y = bb.emit(op.permute_dims(y, [2, 0, 1, 3]))
            finals = [bb.emit(op.permute_dims(f, [1, 0, 2])) for f in finals]
        return relax.Tuple([y] + finals)


class _RNN(_Cell):
    gates = 1
    sequence_activations = ("Tanh",)

    def __init__(self, bb, inputs, attrs):
        super().__init__(bb, inputs, attrs, "RNN")
        self.acts = _activations(attrs, ["Tanh"], self.num_dir)

    def start(self, d):
        return [self.initial(self.init_h, d)]

    def step(self, xt, rt, rb, state, d):
        op = self.op
        pre = op.add(xt, op.matmul(state[0], rt))
        pre = self.bb.emit(op.add(pre, rb) if rb is not None else pre)
        return [self.gate(pre, 0, self.acts[d])]


class _GRU(_Cell):
    gates = 3
    sequence_activations = ("Sigmoid", "Tanh")

    def __init__(self, bb, inputs, attrs):
        super().__init__(bb, inputs, attrs, "GRU")
        self.acts = _activations(attrs, ["Sigmoid", "Tanh"], self.num_dir)
        self.linear_before_reset = int(attrs.get("linear_before_reset", 0))

    def start(self, d):
        return [self.initial(self.init_h, d)]

    def recurrent_bias_outside(self):
        # with linear_before_reset, h~ = tanh(x_h + r * (H·R_hᵀ + Rb_h)): Rb_h inside the product with r
        return (2,) if self.linear_before_reset else ()

    def step(self, xt, rt, rb, state, d):
        op, bb = self.op, self.bb
        h = state[0]
        xz, xr, xh = self.split(xt, 3)
        rz_t, rr_t, rh_t = self.split(rt, 3)  # R^T [H, 3H] -> three [H, H]
        rbz, rbr, rbh = self.split(rb, 3) if rb is not None else (None, None, None)

        def plus(a, b):
            return op.add(a, b) if b is not None else a

        f, g = self.acts[2 * d], self.acts[2 * d + 1]
        z = self.gate(bb.emit(plus(op.add(xz, op.matmul(h, rz_t)), rbz)), 0, f)
        r = self.gate(bb.emit(plus(op.add(xr, op.matmul(h, rr_t)), rbr)), 1, f)
        if self.linear_before_reset:
            hh = op.add(xh, op.multiply(r, plus(op.matmul(h, rh_t), rbh)))
        else:
            hh = plus(op.add(xh, op.matmul(op.multiply(r, h), rh_t)), rbh)
        hh = self.gate(bb.emit(hh), 2, g)
        one = _const(1.0, self.dtype)
        return [bb.emit(op.add(op.multiply(op.subtract(one, z), hh), op.multiply(z, h)))]


class _LSTM(_Cell):
    gates = 4
    outputs_state = True
    sequence_activations = ("Sigmoid", "Tanh", "Tanh")

    def __init__(self, bb, inputs, attrs):
        super().__init__(bb, inputs, attrs, "LSTM")
        if int(attrs.get("input_forget", 0)):
            raise TunerError("LSTM input_forget=1 (coupled input and forget gates) is not supported")
        get = lambda i: inputs[i] if len(inputs) > i and inputs[i] is not None else None  # noqa: E731
        self.init_c, self.p = get(6), get(7)
        self.acts = _activations(attrs, ["Sigmoid", "Tanh", "Tanh"], self.num_dir)

    def start(self, d):
        return [self.initial(self.init_h, d), self.initial(self.init_c, d)]

    def sequence_kernel_ok(self) -> bool:
        return self.p is None and super().sequence_kernel_ok()

    def step(self, xt, rt, rb, state, d):
        op, bb = self.op, self.bb
        h, c = state
        pre = op.add(xt, op.matmul(h, rt))
        pre = bb.emit(op.add(pre, rb) if rb is not None else pre)
        i, o, f, cc = self.split(pre, 4)  # ONNX gate order: input, output, forget, cell
        if self.p is not None:
            pd = bb.emit(op.squeeze(op.strided_slice(self.p, [0], [d], [d + 1]), [0]))
            pi, po, pf = self.split(pd, 3)
            i = bb.emit(op.add(i, op.multiply(pi, c)))
            f = bb.emit(op.add(f, op.multiply(pf, c)))
        fa, ga, ha = self.acts[3 * d], self.acts[3 * d + 1], self.acts[3 * d + 2]
        i, f, cc = self.gate(i, 0, fa), self.gate(f, 2, fa), self.gate(cc, 3, ga)
        c_new = bb.emit(op.add(op.multiply(f, c), op.multiply(i, cc)))
        if self.p is not None:
            o = bb.emit(op.add(o, op.multiply(po, c_new)))
        o = self.gate(o, 1, fa)
        return [bb.emit(op.multiply(o, _activation(bb, ha[0], c_new, ha[1], ha[2], self.dtype))), c_new]


def convert(op_name: str, bb, inputs, attrs):
    """The Relax expression (a Tuple of the node's outputs) for an LSTM, GRU or RNN node."""
    cls = {"LSTM": _LSTM, "GRU": _GRU, "RNN": _RNN}[op_name]
    for k, name in enumerate(("X", "W", "R")):
        if inputs[k] is None or getattr(inputs[k].ty, "shape", None) is None:
            raise TunerError(f"{op_name}: input {name} needs a static shape")
    cell = cls(bb, inputs, attrs)
    lanes = _SEQUENCE_LANES.get()
    if lanes and cell.sequence_kernel_ok():
        return cell.run_sequence(lanes)
    return cell.run()
