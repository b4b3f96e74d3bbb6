"""Ops that compute with sizes, kept symbolic for packages over a range of shapes.

`Range(0, seq_len, 1)` (position ids, as a BERT export computes them from `Shape(input_ids)[1]`): TVM's converter
turns a size it is given as a symbolic expression into a tensor and back into a new size variable it cannot
relate to the input's (`range_len_0`), and the VM later finds a shape it cannot compute. `arange` over the
symbolic size itself keeps the length `seq_len` that every later shape is written in.
"""

from __future__ import annotations


def range_(bb, inputs, attrs):
    """Range(start, limit, delta) with constant start and delta and a limit that is a size (symbolic, or a
    pinned dimension's number); None for anything else."""
    import tvm
    from tvm import relax

    start, limit, delta = inputs
    s, d = _int_scalar(start), _int_scalar(delta)
    if s is None or d is None or d == 0 or not tvm.ir.is_prim_expr(limit):
        return None
    dtype = str(start.ty.dtype)
    if dtype not in ("int32", "int64"):
        return None
    if isinstance(limit, tvm.tirx.IntImm):  # a size that became a number (a pinned dimension): a constant
        import numpy as np

        return relax.const(np.arange(s, int(limit.value), d, dtype=dtype), dtype)
    if str(limit.ty) != "int64":
        limit = tvm.tirx.Cast("int64", limit)
    return relax.op.arange(s, limit, d, dtype)


def _int_scalar(x):
    """The value of a constant integer scalar, else None."""
    import numpy as np
    import tvm

    if not isinstance(x, tvm.ir.GenericConst):  # a relax constant in TVM 0.27
        return None
    data = x.value
    if not hasattr(data, "numpy"):
        return None
    value = data.numpy()
    if value.size != 1 or not np.issubdtype(value.dtype, np.integer):
        return None
    return int(value.reshape(()))
