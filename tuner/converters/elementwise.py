"""Element-wise ops whose ONNX edge cases TVM 0.27's converters get wrong (found by the conformance run):

- `IsInf` ignores `detect_positive` / `detect_negative`: both infinities always count.
- `BitShift` by a count outside [0, bits) is what the CPU makes of it (x86 masks the count); ONNX, like numpy,
  gives 0, or -1 for a right shift of a negative signed value.
"""

from __future__ import annotations


def is_inf(bb, inputs, attrs):
    from tvm import relax

    op = relax.op
    x = inputs[0]
    positive, negative = int(attrs.get("detect_positive", 1)), int(attrs.get("detect_negative", 1))
    inf = op.isinf(x)
    if positive and negative:
        return inf
    zero = relax.const(0, str(x.ty.dtype))
    if positive:
        return op.logical_and(inf, op.greater(x, zero))
    if negative:
        return op.logical_and(inf, op.less(x, zero))
    return op.zeros_like(inf)


def bit_shift(bb, inputs, attrs):
    import numpy as np
    from tvm import relax

    op = relax.op
    x, count = inputs
    dtype = str(x.ty.dtype)
    bits = np.iinfo(dtype).bits
    right = attrs.get("direction", b"LEFT")
    right = (right.decode() if isinstance(right, bytes) else right) == "RIGHT"
    zero, top = relax.const(0, dtype), relax.const(bits - 1, dtype)
    in_range = op.logical_and(op.greater_equal(count, zero), op.less_equal(count, top))
    safe = op.minimum(op.maximum(count, zero), top)
    shifted = op.right_shift(x, safe) if right else op.left_shift(x, safe)
    if right and dtype.startswith("int"):
        outside = op.where(op.less(x, zero), relax.const(-1, dtype), zero)  # the sign bit fills the result
    else:
        outside = op.zeros_like(x)
    return op.where(in_range, shifted, outside)
