"""Grouped convolutions (1 < groups < channels, channels-last) with the group as a loop of its own.

TOPI's `group_conv2d_nhwc` computes `out[n, y, x, f]` and reads input channel `f // Og * Cg + rc` (Og output and Cg
input channels per group). Vectorised along f, a vector whose lanes straddle two groups needs a gather: light
ShuffleNet's grouped 1x1 convs (4 groups of 68 channels) ran at 8 GFLOP/s, 10x ONNX Runtime's time, 80% of the
model. Here the block iterates `(n, y, x, g, o)`: the input channel is the same for every lane of a vector along
o (a broadcast), the weights of a group are contiguous, and the output is reshaped back to `(n, y, x, G * Og)` (a
view). Depthwise convs (one input channel per group) keep TOPI's compute, which already vectorises them.
"""

from __future__ import annotations


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
    """TE compute: `data` (N, H, W, C), `weight` (O, KH, KW, C / groups); padding (top, left, bottom, right)."""
    from tvm import te, topi

    n, h, w, _ = (int(d) for d in data.shape)
    o, kh, kw, cg = (int(d) for d in weight.shape)
    og = o // groups
    (sh, sw), (dh, dw) = (int(s) for s in strides), (int(d) for d in dilation)
    top, left, bottom, right = (int(p) for p in padding)
    padded = topi.nn.pad(data, [0, top, left, 0], [0, bottom, right, 0]) if top + left + bottom + right else data
    oh = (h + top + bottom - dh * (kh - 1) - 1) // sh + 1
    ow = (w + left + right - dw * (kw - 1) - 1) // sw + 1
    ry, rx, rc = te.reduce_axis((0, kh), "ry"), te.reduce_axis((0, kw), "rx"), te.reduce_axis((0, cg), "rc")
    grouped = te.compute(
        (n, oh, ow, groups, og),
        lambda b, y, x, g, c: te.sum(
            padded[b, y * sh + ry * dh, x * sw + rx * dw, g * cg + rc].astype(out_dtype)
            * weight[g * og + c, ry, rx, rc].astype(out_dtype),
            axis=[ry, rx, rc],
        ),
        name="group_conv2d_nhwc",
    )
    return topi.reshape(grouped, (n, oh, ow, o))
