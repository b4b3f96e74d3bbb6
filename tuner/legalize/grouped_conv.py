"""Grouped convolutions (1 < groups < channels, channels-last) computed per group, with the group as an axis.

    y = conv2d(x, W, groups=G)                      (N, H, W, G * Og), NHWC
 -> y = reshape(group_conv2d_nhwc(x, W), (N, H, W, G * Og))   the kernel's result is (N, H, W, G, Og)

TOPI's `group_conv2d_nhwc` computes `out[n, y, x, f]` and reads input channel `f // Og * Cg + rc` (Og output and Cg
input channels per group). Vectorised along f, a vector whose lanes straddle two groups needs a gather: light
ShuffleNet's grouped 1x1 convs (4 groups of 68 channels) ran at 8 GFLOP/s, 10x ONNX Runtime's time. Here the block
iterates `(n, y, x, g, o)`: the input channel is the same for every lane of a vector along o (a broadcast), and the
weights of a group are contiguous.

The group axis stays in the graph, not in the kernel: the reshape back to G * Og channels moves below the
element-wise ops that follow (bias, activation, a residual add: their operands reshaped the same way), so they
fuse onto the conv's tiles, and the reshape itself ends as a kernel of its own, which the VM runs as a view (no
copy). Inside the kernel (a reshape after the reduction) it stayed a block of its own that no rule inlines, and the
epilogue ran after it over the whole output, in vectors split across pixels: ShuffleNet's first grouped conv (24 ->
112 channels, 56 x 56) took 5x ONNX Runtime's time. Writing `out[..., g * Og + o]` from the conv block instead is
unsafe: a tile over several groups and part of Og is not a box of the output, and TVM's compute-at then runs the
epilogue over channels not yet computed. Depthwise convs (one input channel per group) keep TOPI's compute, which
already vectorises them; groups of under half a vector of channels run as one banded conv (tuner/banded_conv.py).
"""

from __future__ import annotations

from tuner.legalize.banded_conv import band_weights, banded_conv2d_nhwc, is_banded
from tuner.transform.channel_padding import pad_axis
from tuner.transform.dataflow_facts import bound_value, out_dtype, static_shape, tuple_ints, use_counts
from tuner.transform.transpose_sinking import BINARY, UNARY, call_of_any, elementwise_view

MAX_ROUNDS = 16  # each round moves every reshape one op down; an epilogue is a few ops long


def is_grouped_nhwc(attrs, weight_shape) -> bool:
    """A grouped conv this compute handles: NHWC in and out, OHWI weights, more than one input channel per group."""
    groups = int(attrs.groups)
    return (
        groups > 1
        and str(attrs.data_layout) == "NHWC"
        and str(attrs.out_layout or attrs.data_layout) == "NHWC"
        and str(attrs.kernel_layout) == "OHWI"
        and int(weight_shape[3]) > 1
    )


def grouped_conv2d_nhwc(data, weight, strides, padding, dilation, groups: int, out_dtype: str):
    """TE compute: `data` (N, H, W, C), `weight` (O, KH, KW, C / groups) -> (N, OH, OW, groups, O / groups);
    padding (top, left, bottom, right)."""
    from tvm import te, tirx, topi

    n, h, w, _ = (int(d) for d in data.shape)
    o, kh, kw, cg = (int(d) for d in weight.shape)
    og = o // groups
    (sh, sw), (dh, dw) = (int(s) for s in strides), (int(d) for d in dilation)
    top, left, bottom, right = (int(p) for p in padding)
    padded = topi.nn.pad(data, [0, top, left, 0], [0, bottom, right, 0]) if top + left + bottom + right else data
    oh = (h + top + bottom - dh * (kh - 1) - 1) // sh + 1
    ow = (w + left + right - dw * (kw - 1) - 1) // sw + 1
    # every extent int64, as Relax's shapes are: FuseTIR checks the buffers agree, and RewriteLayout packs the
    # weights only when their indices have one type
    i64 = [tirx.IntImm("int64", v) for v in (0, kh, kw, cg, n, oh, ow, groups, og)]
    zero, kh, kw, cg, shape = i64[0], i64[1], i64[2], i64[3], i64[4:]
    ry, rx, rc = te.reduce_axis((zero, kh), "ry"), te.reduce_axis((zero, kw), "rx"), te.reduce_axis((zero, cg), "rc")
    return te.compute(
        shape,
        lambda b, y, x, g, c: te.sum(
            padded[b, y * sh + ry * dh, x * sw + rx * dw, g * cg + rc].astype(out_dtype)
            * weight[g * og + c, ry, rx, rc].astype(out_dtype),
            axis=[ry, rx, rc],
        ),
        name="group_conv2d_nhwc",
    )


def group_convs_by_group(mod, lanes: int | None = None):
    """`mod` with its grouped channels-last convs rewritten (see the module docstring); `mod` itself when none is.
    With `lanes`, each group's channels are padded as `padded_group` says."""
    from tvm import relax
    from tvm.relax.dpl import is_op, rewrite_call, wildcard

    conv = is_op("relax.nn.conv2d")(wildcard(), wildcard())
    bb = relax.BlockBuilder(mod)
    changed = False
    for gv, func in list(mod.functions.items()):
        if not isinstance(func, relax.Function):
            continue
        rewriter = _Grouper(func, bb, lanes)
        new = rewrite_call(conv, rewriter.rewrite_conv, func)
        if not rewriter.changed:  # rewrite_call rebuilds the function either way
            continue
        for _ in range(MAX_ROUNDS):
            sinker = _Grouper(new, bb, lanes)
            moved = rewrite_call(call_of_any((*UNARY, *BINARY)), sinker.sink_reshape, new)
            if not sinker.changed:
                break
            new = relax.analysis.remove_all_unused(moved)
        bb.update_func(gv, new)
        changed = True
    return bb.get() if changed else mod


def GroupConvsByGroup(lanes: int | None = None):  # noqa: N802  (a pass, named as TVM names its passes)
    import tvm

    return tvm.transform.module_pass(
        lambda mod, _ctx: group_convs_by_group(mod, lanes), opt_level=0, name="GroupConvsByGroup"
    )


def padded_group(channels: int, lanes: int | None) -> int:
    """Channels per group to compute: the next multiple of the lanes when that adds at most half (28 -> 32, 34 ->
    48, 68 -> 80, 136 -> 144 with AVX-512; ResNeXt's 4 stay 4). The default schedule vectorises a group's
    channels by a divisor of their count: 34 took 2-lane vectors. Light ShuffleNet untuned, whole-model medians:
    unpadded 4.95 ms, padded to multiples of half the lanes 3.5-3.8, to whole vectors 2.9-3.0 (docs/performance.md)."""
    if not lanes or channels % lanes == 0:
        return channels
    padded = -(-channels // lanes) * lanes
    return padded if padded - channels <= channels / 2 else channels


class _Grouper:
    def __init__(self, func, bb, lanes: int | None):
        from tvm import relax

        self.bb = bb
        self.lanes = lanes
        self.changed = False
        self.var2val = relax.analysis.get_var2val(func)
        self.uses = use_counts(func)

    def rewrite_conv(self, expr, _matches):
        from tvm import relax, te

        if not isinstance(expr, relax.Call) or not is_grouped_nhwc(expr.attrs, expr.args[1].ty.shape):
            return expr
        shape = static_shape(expr)
        data, weight = expr.args
        if shape is None or static_shape(data) is None or static_shape(weight) is None:
            return expr
        a = expr.attrs
        groups = int(a.groups)
        dtype = out_dtype(expr)
        x = te.placeholder(list(data.ty.shape.values), str(data.ty.dtype), "x")
        w = te.placeholder(list(weight.ty.shape.values), str(weight.ty.dtype), "w")
        og = shape[3] // groups
        if is_banded(og, static_shape(weight)[3], self.lanes):
            self.changed = True
            return self._banded(expr, x, w, og, dtype)
        padded = padded_group(og, self.lanes)
        if padded != og:  # zero filters at the end of each group; the weights stay constants, folded at build
            weight = _pad_last_of_groups(weight, groups, padded - og, axis=0, fill=0.0)
            w = te.placeholder([groups * padded, *list(w.shape)[1:]], w.dtype, "w")
        y = grouped_conv2d_nhwc(x, w, a.strides, a.padding, a.dilation, groups, dtype)
        kernel = self.bb.add_func(te.create_prim_func([x, w, y]).without_attr("global_symbol"), "group_conv2d_nhwc")
        grouped = [*shape[:3], groups, padded]
        call = relax.call_tir(kernel, relax.Tuple([data, weight]), relax.TensorType(grouped, dtype))
        self.changed = True
        return _ungrouped(call, og, grouped)

    def _banded(self, expr, x, w, og: int, dtype: str):
        """The conv as one banded conv over all channels (tuner/banded_conv.py): a band kernel on the weights
        (folded at build time when they are constants), then the conv; its result needs no reshape."""
        from tvm import relax, te

        a, (data, weight) = expr.attrs, expr.args
        band = band_weights(w, og)
        band_kernel = self.bb.add_func(te.create_prim_func([w, band]).without_attr("global_symbol"), "conv_band")
        band_call = relax.call_tir(
            band_kernel, relax.Tuple([weight]), relax.TensorType([int(d) for d in band.shape], w.dtype)
        )
        b = te.placeholder(band.shape, w.dtype, "band")
        y = banded_conv2d_nhwc(x, b, a.strides, a.padding, a.dilation, og, dtype)
        kernel = self.bb.add_func(te.create_prim_func([x, b, y]).without_attr("global_symbol"), "banded_conv2d_nhwc")
        return relax.call_tir(kernel, relax.Tuple([data, band_call]), relax.TensorType(static_shape(expr), dtype))

    def sink_reshape(self, expr, _matches):
        """op(ungroup(y), c) -> ungroup(op(y, c grouped)) for an element-wise op, `y` a grouped conv's result."""
        from tvm import relax

        view = elementwise_view(expr, self._grouped)
        if view is None:
            return expr
        k, grouped, binary = view
        args = list(expr.args)
        y, og = grouped[k]
        if binary:
            if static_shape(expr) != static_shape(args[k]):
                return expr  # the other operand broadcasts this one larger
            other = _as_grouped(args[1 - k], static_shape(y), og)
            if other is None:
                return expr
            args[1 - k] = other
        args[k] = y
        self.changed = True
        return _ungrouped(relax.Call(expr.op, args, expr.attrs, expr.ty_args), og, static_shape(y))

    def _grouped(self, arg):
        """(y, Og) where `arg` is `_ungrouped(y, Og)` (y: (N, H, W, G, Og or more)), read only here; else None."""
        value = self._value(arg)
        if self.uses.get(arg, 0) != 1 or _op_name(value) != "relax.reshape":
            return None
        src, dst = value.args[0], static_shape(value)
        sliced = self._value(src) if _op_name(self._value(src)) == "relax.strided_slice" else None
        if sliced is not None:
            if self.uses.get(src, 0) != 1 or len(sliced.args) > 4 or tuple_ints(sliced.args[1]) != [4]:
                return None
            if tuple_ints(sliced.args[2]) != [0] or tuple_ints(sliced.args[3]) is None:
                return None
            src = sliced.args[0]
        shape = static_shape(src)
        if shape is None or dst is None or len(shape) != 5 or len(dst) != 4 or dst[:3] != shape[:3]:
            return None
        og = tuple_ints(sliced.args[3])[0] if sliced is not None else shape[4]
        return (src, og) if dst[3] == shape[3] * og else None

    def _value(self, arg):
        return bound_value(self.var2val, arg)


def _op_name(expr) -> str:
    return getattr(getattr(expr, "op", None), "name", "")


def _ungrouped(expr, og: int, shape: list[int]):
    """(N, H, W, G * Og) from a grouped result (N, H, W, G, P): its first Og channels of each group, merged."""
    from tvm import relax

    n, h, w, groups, padded = shape
    if padded != og:
        expr = relax.op.strided_slice(expr, axes=[4], begin=[0], end=[og])
    return relax.op.reshape(expr, [n, h, w, groups * og])


def _as_grouped(operand, grouped: list[int], og: int):
    """The other operand of an element-wise op on an (N, H, W, G * Og) tensor, reshaped to broadcast against
    `grouped` (N, H, W, G, P), each group padded from Og to P channels; None when it does not broadcast along the
    channels as one axis. The padded channels are dropped; a constant's hold ones, which no op divides by zero."""
    from tvm import relax

    shape = static_shape(operand)
    if shape is None or len(shape) > 4:
        return None
    if not shape:
        return operand  # a scalar broadcasts to any shape
    full = [1] * (4 - len(shape)) + shape
    groups, padded = grouped[3], grouped[4]
    if full[3] == 1:
        return relax.op.reshape(operand, [*full, 1])
    if full[3] != groups * og:
        return None
    out = relax.op.reshape(operand, [*full[:3], groups, og])
    dtype = str(operand.ty.dtype)
    return pad_axis(out, 4, padded - og, 1.0, [*full[:3], groups, og], dtype) if padded != og else out


def _pad_last_of_groups(weight, groups: int, extra: int, axis: int, fill: float):
    """`weight` with `extra` entries of `fill` after each of its `groups` along `axis` (the output channels)."""
    from tvm import relax

    shape = static_shape(weight)
    split = [*shape[:axis], groups, shape[axis] // groups, *shape[axis + 1 :]]
    padded = pad_axis(relax.op.reshape(weight, split), axis + 1, extra, fill, split, str(weight.ty.dtype))
    return relax.op.reshape(padded, [*shape[:axis], groups * (shape[axis] // groups + extra), *shape[axis + 1 :]])
