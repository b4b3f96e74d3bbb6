"""Grouped convolutions with few channels per group (ResNeXt: 32 groups of 4) as one banded, depthwise-like conv.

With Og = Cg channels per group, output channel f reads input channels f - o + rc (o = f % Og): a shift of f by
d = rc - o in [-(Og - 1), Cg - 1]. So

    out[n, y, x, f] = sum_{ky, kx, d} in[n, y', x', f + d] * band[ky, kx, d, f]

with band[ky, kx, d, f] = W[f, ky, kx, f % Og + d] where that channel is in f's group, else 0: every term is a
contiguous vector along all C channels (the input padded by Og - 1 channels on each side), at (2 Og - 1) / Cg times
the useful work (7/4 for 4 channels). Computed per group instead (tuner/grouped_conv.py), 4 channels take 4-lane
vectors: a 3x3 conv of 32 groups of 4 at 56 x 56 ran at 1.9 x ONNX Runtime's time. The band is a kernel of its own
on the weights, which FoldConstant evaluates at build time.
"""

from __future__ import annotations


def is_banded(og: int, cg: int, lanes: int | None) -> bool:
    """Groups this compute takes: as many input as output channels, fewer than half a vector of them."""
    return bool(lanes) and og == cg and 1 < og < lanes // 2


def band_weights(weight, og: int):
    """TE compute: `weight` (O, KH, KW, Og) -> band (KH, KW, 2 Og - 1, O), index d + Og - 1 for shift d."""
    from tvm import te, tirx

    o, kh, kw, cg = (int(d) for d in weight.shape)
    shape = [tirx.IntImm("int64", v) for v in (kh, kw, 2 * og - 1, o)]

    def band(ky, kx, di, f):
        rc = f % og + di - (og - 1)
        inside = tirx.all(rc >= 0, rc < cg)
        safe = tirx.max(tirx.min(rc, cg - 1), 0)
        return tirx.if_then_else(inside, weight[f, ky, kx, safe], tirx.const(0, weight.dtype))

    return te.compute(shape, band, name="conv_band")


def banded_conv2d_nhwc(data, band, strides, padding, dilation, og: int, out_dtype: str):
    """TE compute: `data` (N, H, W, C), `band` (KH, KW, 2 Og - 1, C) -> (N, OH, OW, C); padding (top, left, bottom,
    right)."""
    from tvm import te, tirx, topi

    n, h, w, c = (int(d) for d in data.shape)
    kh, kw, taps, _ = (int(d) for d in band.shape)
    (sh, sw), (dh, dw) = (int(s) for s in strides), (int(d) for d in dilation)
    top, left, bottom, right = (int(p) for p in padding)
    padded = topi.nn.pad(data, [0, top, left, og - 1], [0, bottom, right, og - 1])
    oh = (h + top + bottom - dh * (kh - 1) - 1) // sh + 1
    ow = (w + left + right - dw * (kw - 1) - 1) // sw + 1
    i64 = [tirx.IntImm("int64", v) for v in (0, kh, kw, taps, n, oh, ow, c)]  # Relax shapes are int64
    zero, kh, kw, taps, shape = i64[0], i64[1], i64[2], i64[3], i64[4:]
    ry, rx, rd = te.reduce_axis((zero, kh), "ry"), te.reduce_axis((zero, kw), "rx"), te.reduce_axis((zero, taps), "rd")
    return te.compute(
        shape,
        lambda b, y, x, f: te.sum(
            padded[b, y * sh + ry * dh, x * sw + rx * dw, f + rd].astype(out_dtype)
            * band[ry, rx, rd, f].astype(out_dtype),
            axis=[ry, rx, rd],
        ),
        name="banded_conv2d_nhwc",
    )
