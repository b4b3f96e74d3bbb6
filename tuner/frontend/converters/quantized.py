"""ONNX QLinearConv, QLinearMatMul and ConvInteger (TVM 0.27's importer has none of them), with ONNX's exact
integer semantics:

    acc = conv|matmul(x - x_zero_point, w - w_zero_point) in int32   (+ the int32 bias of QLinearConv)
    y   = saturate(round_half_to_even(acc * (x_scale * w_scale / y_scale) + y_zero_point))

as the ONNX reference and ONNX Runtime compute them. Weight zero points and scales may be per output channel
(QLinearConv, ConvInteger) or per column (QLinearMatMul); input scales and zero points per tensor (QLinearMatMul's
`a` also per row). The requantisation runs in float64, as the reference does, so ties round the same way.

Correct first, not fast: the integer conv/matmul is TVM's generic int32 compute; int8 speed would need VNNI
(`vpdpbusd`) tensorisation of the int8 x int8 -> int32 reduction in MetaSchedule and a uint8/int8 layout for it.
"""

from __future__ import annotations

from tuner.core.errors import TunerError


def _op():
    from tvm import relax

    return relax.op


def _const(value, dtype):
    import numpy as np
    from tvm import relax

    return relax.const(np.array(value, dtype=dtype), dtype)


def _dtype(x) -> str:
    return str(x.ty.dtype)


def _ndim(x) -> int:
    return len(x.ty.shape)


def _shape(x) -> list[int]:
    if x.ty.shape is None:
        raise TunerError("quantized ops need static shapes", "pin the input shapes with --input-shape")
    return [int(d) for d in x.ty.shape]


def _minus_zero_point(bb, x, zero_point, per_axis_shape=None):
    """int32 x - zero_point; a 1-D zero point with several values is reshaped to `per_axis_shape`."""
    op = _op()
    x32 = op.astype(x, "int32")
    if zero_point is None:
        return x32
    zp = op.astype(zero_point, "int32")
    if per_axis_shape is not None and _ndim(zero_point) == 1 and _shape(zero_point)[0] > 1:
        zp = op.reshape(zp, per_axis_shape)
    return bb.emit(op.subtract(x32, zp))


def _per_axis(x, shape):
    """A 1-D scale with several values reshaped to broadcast along its axis; scalars as they are."""
    if x is not None and _ndim(x) == 1 and _shape(x)[0] > 1:
        return _op().reshape(x, shape)
    return x


def round_half_to_even(bb, f, dtype: str = "float64"):
    """numpy's rint: floor(f + 0.5), one less where f sat exactly halfway and that landed on an odd number."""
    op = _op()
    r = bb.emit(op.floor(op.add(f, _const(0.5, dtype))))
    tie = op.equal(op.subtract(r, f), _const(0.5, dtype))
    half = op.floor(op.multiply(r, _const(0.5, dtype)))
    odd = op.not_equal(op.subtract(r, op.multiply(half, _const(2, dtype))), _const(0, dtype))
    return bb.emit(op.where(op.logical_and(tie, odd), op.subtract(r, _const(1, dtype)), r))


def requantize(bb, acc, x_scale, w_scale, y_scale, y_zero_point, out_dtype: str):
    """saturate(rint(acc * (x_scale * w_scale / y_scale) + y_zero_point)) as `out_dtype` (int8/uint8)."""
    import numpy as np

    op = _op()
    scale = op.divide(op.multiply(x_scale, w_scale), y_scale)  # in the scales' own dtype, as the reference
    f = op.multiply(op.astype(acc, "float64"), op.astype(scale, "float64"))
    if y_zero_point is not None:
        f = op.add(f, op.astype(y_zero_point, "float64"))
    r = round_half_to_even(bb, bb.emit(f))
    info = np.iinfo(out_dtype)
    return op.astype(op.clip(r, int(info.min), int(info.max)), out_dtype)


def _conv_attrs(x, w, attrs) -> dict:
    """strides, padding, dilation, groups of an ONNX Conv-like node (auto_pad resolved from static shapes)."""
    spatial = _ndim(x) - 2
    kernel = _shape(w)[2:]
    strides = list(attrs.get("strides", [1] * spatial))
    dilations = list(attrs.get("dilations", [1] * spatial))
    pads = list(attrs.get("pads", [0] * (2 * spatial)))
    auto_pad = attrs.get("auto_pad", b"NOTSET")
    auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else str(auto_pad)
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        size = _shape(x)[2:]
        pads = [0] * (2 * spatial)
        for i in range(spatial):
            out = -(-size[i] // strides[i])
            total = max((out - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1 - size[i], 0)
            small = total // 2
            pads[i], pads[i + spatial] = (small, total - small) if auto_pad == "SAME_UPPER" else (total - small, small)
    elif auto_pad == "VALID":
        pads = [0] * (2 * spatial)
    return {"strides": strides, "padding": pads, "dilation": dilations, "groups": int(attrs.get("group", 1))}


def _int_conv(bb, x32, w32, attrs_in, x, w):
    op = _op()
    a = _conv_attrs(x, w, attrs_in)
    if _ndim(x) == 4:
        return bb.emit(op.nn.conv2d(x32, w32, out_dtype="int32", **a))
    if _ndim(x) == 3:
        return bb.emit(op.nn.conv1d(x32, w32, out_dtype="int32", **a))
    raise TunerError(f"quantized convolution of a {_ndim(x)}-D input", "1-D and 2-D convolutions are supported")


def qlinear_conv(bb, inputs, attrs):
    x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp = (list(inputs) + [None] * 9)[:8]
    bias = inputs[8] if len(inputs) > 8 else None
    channels = _shape(w)[0]
    spatial_ones = [1] * (_ndim(x) - 2)
    x32 = _minus_zero_point(bb, x, x_zp)
    w32 = _minus_zero_point(bb, w, w_zp, [channels, 1, *spatial_ones])
    acc = _int_conv(bb, x32, w32, attrs, x, w)
    if bias is not None:
        acc = bb.emit(_op().add(acc, _op().reshape(_op().astype(bias, "int32"), [1, channels, *spatial_ones])))
    w_scale = _per_axis(w_scale, [1, channels, *spatial_ones])
    out_dtype = _dtype(y_zp) if y_zp is not None else _dtype(x)
    return requantize(bb, acc, x_scale, w_scale, y_scale, y_zp, out_dtype)


def qlinear_matmul(bb, inputs, attrs):
    a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp = inputs[:8]
    a32 = _minus_zero_point(bb, a, a_zp, [-1, 1])  # per row of a
    b32 = _minus_zero_point(bb, b, b_zp)  # per column of b: its last axis, as broadcasting does
    acc = bb.emit(_op().matmul(a32, b32, out_dtype="int32"))
    out_dtype = _dtype(y_zp) if y_zp is not None else _dtype(a)
    return requantize(bb, acc, _per_axis(a_scale, [-1, 1]), b_scale, y_scale, y_zp, out_dtype)


def conv_integer(bb, inputs, attrs):
    x, w = inputs[0], inputs[1]
    x_zp = inputs[2] if len(inputs) > 2 else None
    w_zp = inputs[3] if len(inputs) > 3 else None
    spatial_ones = [1] * (_ndim(x) - 2)
    x32 = _minus_zero_point(bb, x, x_zp)
    w32 = _minus_zero_point(bb, w, w_zp, [_shape(w)[0], 1, *spatial_ones])
    return _int_conv(bb, x32, w32, attrs, x, w)
