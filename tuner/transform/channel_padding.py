"""Output channels padded to the vector width: a channels-last conv, or a matmul by a constant, whose output
channel count the vector lanes do not divide computes a few zero filters (columns) more and drops them.

    y = conv2d(x, W)                    O output channels, O % lanes != 0, at most 1/8 more work
 -> y = strided_slice(conv2d(x, W'), C, 0:O)       W' = W with zero filters up to a multiple of the lanes
    y = matmul(x, W)                    W constant [..., K, N], N % lanes != 0, at most 1/8 more work
 -> y = strided_slice(matmul(x, W'), -1, 0:N)      W' = W with zero columns up to a multiple of the lanes

The default schedule vectorises the output channels: 1000 channels on AVX-512 (16 lanes) take 8-lane vectors
and cannot put vectors side by side, so SqueezeNet's 13x13 classifier conv (512 -> 1000) ran at 168 GFLOP/s
where 1008 channels ran at 303 (timed alone, default schedules; docs/performance.md). The slice then moves below
the per-channel element-wise ops that follow (bias, activation: their constants padded the same way), so they
stay in the conv's kernel, and it ends before the first op it cannot pass (a pool, a reshape, the next conv).
A matmul's columns are its vector axis the same way: the PP-OCRv4 recognizer's classifier (40x120 by 120x6625
characters; 6625 = 5^3 x 53) tiled its columns by 5, unvectorised, 1.74 ms against ONNX Runtime's 0.45.
"""

from __future__ import annotations

import numpy as np

from tuner.transform.dataflow_facts import bound_value, constant_vars, static_shape, tuple_ints, use_counts
from tuner.transform.transpose_sinking import BINARY, UNARY, call_of_any, elementwise_view

MAX_EXTRA_WORK = 1 / 8  # 1000 -> 1008 is 0.8%; 24 -> 32 would be 33%: left as it is
MAX_ROUNDS = 16  # each round moves every slice one op down; an epilogue is a few ops long


def pad_conv_channels(mod, lanes: int):
    """`mod` with its channels-last convs and its matmuls by constants padded (see the module docstring); `mod`
    itself when none is."""
    from tvm import relax
    from tvm.relax.dpl import is_op, rewrite_call, wildcard

    conv = is_op("relax.nn.conv2d")(wildcard(), wildcard())
    matmul = is_op("relax.matmul")(wildcard(), wildcard())
    out = mod
    for gv, func in mod.functions.items():
        if not isinstance(func, relax.Function):
            continue
        padder = _Padder(func, lanes)
        new = rewrite_call(conv, padder.pad_conv, func)
        new = rewrite_call(matmul, padder.pad_matmul, new)
        if not padder.changed:  # rewrite_call rebuilds the function either way
            continue
        for _ in range(MAX_ROUNDS):
            sinker = _Padder(new, lanes)
            moved = rewrite_call(call_of_any((*UNARY, *BINARY)), sinker.sink_slice, new)
            if not sinker.changed:
                break
            new = relax.analysis.remove_all_unused(moved)
        out = out.clone() if out is mod else out
        out[gv] = new
    return out


def PadConvChannels(lanes: int):  # noqa: N802  (a pass, named as TVM names its passes)
    import tvm

    return tvm.transform.module_pass(
        lambda mod, _ctx: pad_conv_channels(mod, lanes), opt_level=0, name="PadConvChannels"
    )


class _Padder:
    def __init__(self, func, lanes: int):
        from tvm import relax

        self.lanes = lanes
        self.changed = False
        self.var2val = relax.analysis.get_var2val(func)
        self.uses = use_counts(func)
        self.constant = constant_vars(func)

    def _value(self, arg):
        return bound_value(self.var2val, arg)

    def _is_constant(self, expr) -> bool:
        import tvm

        return isinstance(self._value(expr), tvm.ir.expr.Constant) or expr in self.constant

    def pad_conv(self, expr, _matches):
        from tvm import relax

        if not isinstance(expr, relax.Call) or not self._is_constant(expr.args[1]):
            return expr
        a = expr.attrs
        layout = str(a.out_layout or a.data_layout)
        shape = static_shape(expr)
        if int(a.groups) != 1 or shape is None or not layout.endswith("C") or len(layout) != len(shape):
            return expr
        channels = shape[-1]
        padded = -(-channels // self.lanes) * self.lanes
        if padded == channels or padded - channels > MAX_EXTRA_WORK * channels:
            return expr
        o_axis = str(a.kernel_layout).index("O")
        weight = pad_axis(expr.args[1], o_axis, padded - channels)
        conv = relax.Call(expr.op, [expr.args[0], weight], a, expr.ty_args)
        self.changed = True
        return _slice_channels(conv, len(shape), channels)

    def pad_matmul(self, expr, _matches):
        from tvm import relax

        if not isinstance(expr, relax.Call) or not self._is_constant(expr.args[1]):
            return expr
        shape, w_shape = static_shape(expr), static_shape(expr.args[1])
        if shape is None or w_shape is None or len(w_shape) < 2 or len(shape) < 2:
            return expr
        columns = shape[-1]
        padded = -(-columns // self.lanes) * self.lanes
        if padded == columns or padded - columns > MAX_EXTRA_WORK * columns:
            return expr
        weight = pad_axis(expr.args[1], len(w_shape) - 1, padded - columns)
        self.changed = True
        return _slice_channels(
            relax.Call(expr.op, [expr.args[0], weight], expr.attrs, expr.ty_args), len(shape), columns
        )

    def sink_slice(self, expr, _matches):
        """op(slice(y), c) -> slice(op(y, c padded)) for an element-wise op and a constant broadcast per channel."""
        from tvm import relax

        view = elementwise_view(expr, self._sliced)
        if view is None or (view[2] and view[1][1 - view[0]] is not None):
            return expr
        k, sliced, binary = view
        args = list(expr.args)
        y, channels = sliced[k]
        if binary:
            other = args[1 - k]
            if not self._is_constant(other) or not _same_shape_as(expr, args[k]):
                return expr  # the other operand is not a constant, or broadcasts the sliced one larger
            args[1 - k] = _pad_operand(other, channels, static_shape(y)[-1])
            if args[1 - k] is None:
                return expr
        args[k] = y
        self.changed = True
        return _slice_channels(relax.Call(expr.op, args, expr.attrs, expr.ty_args), len(static_shape(y)), channels)

    def _sliced(self, arg):
        """(y, channels) where `arg` is a slice of y's first channels (the last axis) read only here, else None."""
        from tvm import relax

        value = self._value(arg)
        if not (isinstance(value, relax.Call) and getattr(value.op, "name", "") == "relax.strided_slice"):
            return None
        shape = static_shape(value.args[0])
        axes, begin, end = (tuple_ints(value.args[i]) for i in (1, 2, 3))
        if self.uses.get(arg, 0) != 1 or shape is None or len(value.args) > 4:  # strides given: not ours
            return None
        if axes != [len(shape) - 1] or begin != [0] or end is None:
            return None
        return value.args[0], end[0]


def _same_shape_as(expr, arg) -> bool:
    return static_shape(expr) is not None and static_shape(expr) == static_shape(arg)


def _slice_channels(expr, rank: int, channels: int):
    """The first `channels` of the last of `rank` axes."""
    from tvm import relax

    return relax.op.strided_slice(expr, axes=[rank - 1], begin=[0], end=[channels])


def pad_axis(expr, axis: int, extra: int, fill: float = 0.0, shape: list[int] | None = None, dtype: str | None = None):
    """`expr` (constant or computed from constants: folded at build time) with `extra` entries of `fill` appended
    along `axis`; `shape` and `dtype` are `expr`'s, given where it is not normalized yet (a call just built)."""
    from tvm import relax

    shape = list(shape or static_shape(expr))
    shape[axis] = extra
    dtype = dtype or str(expr.ty.dtype)
    return relax.op.concat([expr, relax.const(np.full(shape, fill, dtype=dtype), dtype)], axis=axis)


def _pad_operand(operand, channels: int, padded: int):
    """A per-channel (or scalar) operand of an element-wise op, padded to `padded` channels; None when it does not
    broadcast along the channels. The padded lanes are dropped; they hold ones, which no op divides by zero."""
    shape = static_shape(operand)
    if shape is None or (shape and shape[-1] not in (1, channels)):
        return None
    if not shape or shape[-1] == 1:
        return operand  # a scalar, or broadcast along the channels: valid for any count
    return pad_axis(operand, len(shape) - 1, padded - channels, fill=1.0)
