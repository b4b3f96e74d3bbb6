"""Resize where TVM 0.27's converter is wrong or refuses, as a product of per-axis interpolation matrices.

TVM's resize takes output sizes only and derives each axis's scale from them, so a scale whose product with the
input length is not whole (0.6 of 4: ONNX keeps 0.6, TVM uses 2/4) samples the wrong points; it has no
`antialias`, no `half_pixel_symmetric`, divides by zero for align_corners onto one pixel, and ignores `axes`.
Interpolation in ONNX's Resize is separable and linear in the input, so for static shapes each resized axis is a
constant matrix M (out × in): y = M x along that axis. M is computed at compile time by ONNX's own reference
implementation (onnx.reference) resizing the identity — every mode, coordinate transform and filter it knows,
exactly as it defines them. The cost is a dense matmul per axis (in × out per row instead of a few taps), so
this path is taken only where TVM's converter is wrong; everything else stays on TVM's resize kernels.
"""

from __future__ import annotations

import numpy as np

from tuner.frontend.converters.attrs import constant_values

_PASSED_ATTRS = ("mode", "coordinate_transformation_mode", "cubic_coeff_a", "exclude_outside", "nearest_mode",
                 "antialias")  # fmt: skip


def _text(value, default: str) -> str:
    if value is None:
        return default
    return value.decode() if isinstance(value, bytes) else str(value)


def axis_matrix(n_in: int, n_out: int, scale: float | None, attrs: dict) -> np.ndarray:
    """M (n_out × n_in) of one axis: ONNX's reference Resize applied to the n_in basis signals. `scale` None:
    the output length is given (sizes), else the scale is (scales)."""
    import onnx
    from onnx import TensorProto, helper
    from onnx.reference import ReferenceEvaluator

    kept = {k: attrs[k] for k in _PASSED_ATTRS if attrs.get(k) is not None}
    if scale is None:
        inputs, init = ["X", "", "", "sizes"], [helper.make_tensor("sizes", TensorProto.INT64, [2], [n_in, n_out])]
    else:
        inputs, init = ["X", "", "scales"], [helper.make_tensor("scales", TensorProto.FLOAT, [2], [1.0, scale])]
    node = helper.make_node("Resize", inputs, ["Y"], **kept)
    graph = helper.make_graph(
        [node],
        "axis",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [n_in, n_in])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)],
        init,
    )
    model = helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 19)])
    (y,) = ReferenceEvaluator(model).run(None, {"X": np.eye(n_in, dtype=np.float32)})
    assert y.shape == (n_in, n_out), (y.shape, n_in, n_out)
    return y.T.astype(np.float32)


def resize_plan(shape, attrs, scales, sizes):
    """[(axis, n_in, n_out, scale or None)] of the resized axes, and whether TVM's converter would get them
    wrong; None when this path does not apply."""
    rank = len(shape)
    axes = [a % rank for a in (attrs.get("axes") or range(rank))]
    values = scales if scales is not None else sizes
    if values is None or len(values) != len(axes):
        return None
    if _text(attrs.get("keep_aspect_ratio_policy"), "stretch") != "stretch":
        return None
    plan, wrong = [], bool(attrs.get("axes")) or int(attrs.get("antialias", 0) or 0) == 1
    coord = _text(attrs.get("coordinate_transformation_mode"), "half_pixel")
    wrong |= coord == "half_pixel_symmetric"
    for axis, v in zip(axes, values):
        n_in = shape[axis]
        if scales is not None:
            n_out = int(np.floor(n_in * float(v)))
            if float(v) == 1.0:
                continue
            wrong |= not float(n_in * float(v)).is_integer()
            plan.append((axis, n_in, n_out, float(v)))
        else:
            n_out = int(v)
            if n_out == n_in:
                continue
            plan.append((axis, n_in, n_out, None))
        wrong |= axis < 2  # TVM resizes the spatial axes only
        wrong |= coord == "align_corners" and n_out == 1  # TVM divides by n_out - 1
    return plan if wrong else None


def resize(bb, inputs, attrs):
    import tvm
    from tvm import relax

    op = relax.op
    x = inputs[0]
    dtype = str(x.ty.dtype)
    if not dtype.startswith(("float", "bfloat")) or x.ty.shape is None:
        return None
    if not all(isinstance(d, tvm.tirx.IntImm) for d in x.ty.shape):
        return None
    if _text(attrs.get("coordinate_transformation_mode"), "half_pixel") == "tf_crop_and_resize":
        return None  # extrapolation makes it affine, not linear: TVM's converter

    given = [inputs[i] if len(inputs) > i else None for i in (2, 3)]
    values = [constant_values(e) for e in given]
    if any(e is not None and v is None for e, v in zip(given, values)):
        return None  # run-time scales or sizes: TVM's converter (or its refusal)
    scales, sizes = (v if v is not None and v.size else None for v in values)
    shape = [int(d) for d in x.ty.shape]
    plan = resize_plan(shape, attrs, scales, sizes)
    if plan is None:
        return None
    y = op.astype(x, "float32") if dtype != "float32" else x
    rank = len(shape)
    for axis, n_in, n_out, scale in plan:
        m = relax.const(axis_matrix(n_in, n_out, scale, attrs).T)  # in × out
        if axis == rank - 1:
            y = op.matmul(y, m)
        else:
            order = [a for a in range(rank) if a != axis] + [axis]
            back = list(np.argsort(order))
            y = op.permute_dims(op.matmul(op.permute_dims(y, order), m), [int(a) for a in back])
    return op.astype(y, dtype) if dtype != "float32" else y
