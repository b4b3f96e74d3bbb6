"""3x3 stride-1 convolutions (NHWC) as Winograd F(m x m, 3 x 3): fewer multiplies than the direct conv.

ONNX Runtime's CPU convolutions are direct (MLAS, NCHWc). Winograd computes an m x m output tile from an
(m + 2) x (m + 2) input tile with (m + 2)^2 products per channel pair instead of 9 m^2: 4x fewer at m = 4. The
weights' transform U = G g G^T is a constant, folded at build time (FoldConstant after legalization); what runs is
the input transform (V = B^T d B per tile and channel), a batched matmul over the (m + 2)^2 tile positions
(M = tiles, K = input channels, N = output channels), and the output transform (Y = A^T M A) that the epilogue
(bias, ReLU, residual) follows. The transforms are block-local adds and carry schedules of their own
(tuning/winograd_transforms.py, named by the blocks' `schedule_rule`); the batched matmul is an ordinary anchor
for multi-level tiling.

Taken (`winograd_tile`) where it measured faster: enough input channels and tiles (the matmul's K and M), few
outputs computed in vain in partial tiles (a 7 x 7 map is 16 tiles of 2 covering 8 x 8: direct), transformed
weights (`(m + 2)^2 / 9` times the direct ones) of at most MAX_WEIGHT_BYTES. Not for CUDA (convs stay NCHW
there) nor the `nchwc` layout.
"""

from __future__ import annotations

import numpy as np

INPUT_RULE = "winograd_input"  # schedule rules of the transforms (tuning/winograd_transforms.py)
OUTPUT_RULE = "winograd_output"
# Measured per conv, Winograd against direct, untuned (docs/performance.md): 24+ input channels won from 1.2x
# (96 at 20x20) to 2.1x (256 at 56x56, 9 MB of transformed weights), 16 channels at 160x160 lost 7%
MIN_CHANNELS = 24  # input channels: with fewer, the transforms cost more than the matmul saves
MIN_TILES = 49  # matmul rows below this (a 14x14 map at m = 2) keep the direct conv
MAX_WEIGHT_BYTES = 64 << 20  # transformed fp32 weights above this stay direct (streamed once per call)
MAX_COVER = 1.2  # outputs computed (whole tiles) per output kept: 13x13 at m = 2 computes 14x14 (1.16)


def winograd_tile(call) -> int | None:
    """The output tile m for a Relax conv2d call that Winograd takes, or None: NHWC/OHWI, 3x3, stride 1,
    dilation 1, one group, static shapes, float32, constant weights, enough tiles and small enough weights."""
    import tvm

    a = call.attrs
    if (str(a.data_layout), str(a.kernel_layout), str(a.out_layout)) != ("NHWC", "OHWI", "NHWC"):
        return None
    if int(a.groups) != 1 or any(int(s) != 1 for s in a.strides) or any(int(d) != 1 for d in a.dilation):
        return None
    data, weight = call.args
    # weights are constants here (bound before lowering), or a layout transform of one (a dataflow var) that
    # FoldConstant folds with their Winograd transform; a function parameter would be transformed per call
    parameter = isinstance(weight, tvm.relax.Var) and not isinstance(weight, tvm.relax.DataflowVar)
    if parameter or str(data.ty.dtype) != "float32":
        return None
    try:
        n, h, w, ci = (int(x) for x in data.ty.shape.values)
        co, kh, kw, _ = (int(x) for x in weight.ty.shape.values)
    except (TypeError, ValueError, AttributeError):
        return None
    if (kh, kw) != (3, 3) or ci < MIN_CHANNELS:
        return None
    pt, pl, pb, pr = (int(p) for p in a.padding)
    oh, ow = h + pt + pb - 2, w + pl + pr - 2
    for m in (4, 2):
        tiles = n * -(-oh // m) * -(-ow // m)
        covered = tiles * m * m  # a map m does not divide ends in partial tiles, computed whole
        if tiles >= MIN_TILES and covered <= MAX_COVER * n * oh * ow and 4 * (m + 2) ** 2 * ci * co <= MAX_WEIGHT_BYTES:
            return m
    return None


def transform_matrices(m: int):
    """(A, B, G) of F(m x m, 3 x 3) as float64 arrays, TOPI's Cook-Toom construction (its interpolation points,
    chosen for accuracy): output Y = A^T M A with A (m + 2, m), input V = B^T d B with B (m + 2, m + 2), weights
    U = G g G^T with G (m + 2, 3)."""
    from tvm.topi.nn.winograd_util import _cook_toom_convolution, _interpolation_points

    a, b, g = _cook_toom_convolution(_interpolation_points(m + 1), m, 3)
    return np.asarray(a, "float64"), np.asarray(b, "float64"), np.asarray(g, "float64")


def transformed_weights(weight, m: int):
    """The TE compute U[eps, nu, ci, co] = (G g G^T)[eps, nu] of OHWI weights g (a constant: folded at build)."""
    from tvm import te, topi

    co, _, _, ci = (int(x) for x in weight.shape)
    g = topi.utils.const_matrix(transform_matrices(m)[2].astype("float32"), "G")
    kh, kw = te.reduce_axis((0, 3), "kh"), te.reduce_axis((0, 3), "kw")
    return te.compute(
        (m + 2, m + 2, ci, co),
        lambda eps, nu, i, o: te.sum(weight[o, kh, kw, i] * g[eps, kh] * g[nu, kw], axis=[kh, kw]),
        name="winograd_weights",
    )


def conv2d_winograd_nhwc(data, u, m: int, padding, out_dtype: str = "float32"):
    """The TE compute: NHWC data, U[alpha, alpha, CI, CO] transformed weights -> NHWC output. Each 2-D
    transform is two 1-D passes (rows, then columns): 2 x 6^3 products per tile and channel instead of 6^4.
    The input transform's last pass is `data_pack`, the output transform's is the output itself, so the epilogue
    follows it per output tile."""
    from tvm import te, topi

    n, h, w, ci = (int(x) for x in data.shape)
    alpha, _, _, co = (int(x) for x in u.shape)
    a_np, b_np, _ = transform_matrices(m)
    pt, pl, pb, pr = padding
    oh, ow = h + pt + pb - 2, w + pl + pr - 2
    nh, nw = -(-oh // m), -(-ow // m)
    tiles = n * nh * nw
    # partial tiles at the bottom and right read zeros past the padding; their extra outputs are never stored
    padded = topi.nn.pad(data, [0, pt, pl, 0], [0, pb + nh * m - oh, pr + nw * m - ow, 0], name="data_pad")
    b = topi.utils.const_matrix(b_np.astype("float32"), "B")  # B[r, eps]
    a = topi.utils.const_matrix(a_np.astype("float32"), "A")  # A[r, v]

    ra = te.reduce_axis((0, alpha), "ra")
    rows = te.compute(
        (alpha, alpha, tiles, ci),
        lambda eps, rb, p, c: te.sum(
            padded[p // (nh * nw), (p // nw) % nh * m + ra, p % nw * m + rb, c] * b[ra, eps], axis=ra
        ),
        name="winograd_input_rows",
    )
    rb = te.reduce_axis((0, alpha), "rb")
    data_pack = te.compute(
        (alpha, alpha, tiles, ci),
        lambda eps, nu, p, c: te.sum(rows[eps, rb, p, c] * b[rb, nu], axis=rb),
        name="data_pack",
        attrs={"schedule_rule": INPUT_RULE},
    )
    rc = te.reduce_axis((0, ci), "rc")
    bgemm = te.compute(
        (alpha, alpha, tiles, co),
        lambda eps, nu, p, o: te.sum(data_pack[eps, nu, p, rc] * u[eps, nu, rc, o], axis=[rc]),
        name="bgemm",
    )
    sa = te.reduce_axis((0, alpha), "sa")
    cols = te.compute(
        (m, alpha, tiles, co),
        lambda vh, sb, p, o: te.sum(bgemm[sa, sb, p, o] * a[sa, vh], axis=sa),
        name="winograd_output_rows",
    )
    sb = te.reduce_axis((0, alpha), "sb")
    return te.compute(
        (n, oh, ow, co),
        lambda i, y, x, o: te.sum(
            (cols[y % m, sb, i * nh * nw + y // m * nw + x // m, o] * a[sb, x % m]).astype(out_dtype), axis=sb
        ),
        name="conv2d_winograd",
        attrs={"schedule_rule": OUTPUT_RULE},
    )


def legalize(bb, call, m: int):
    """The call as Winograd: the transformed weights a constant, the conv one TE kernel."""
    u = bb.emit_te(transformed_weights, call.args[1], m, primfunc_name_hint="winograd_weights")
    padding = [int(p) for p in call.attrs.padding]
    return bb.call_te(
        conv2d_winograd_nhwc,
        call.args[0],
        u,
        m,
        padding,
        str(call.ty.dtype),
        primfunc_name_hint="conv2d_winograd",
    )
