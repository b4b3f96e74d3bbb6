"""Normalizations TVM 0.27 lacks or gets wrong (found by the conformance run):

- `LayerNormalization`'s Mean and InvStdDev outputs are placeholders (a float32 scalar 0) in TVM's converter; Y is
  right. Ours keeps TVM's fused `layer_norm` for Y and computes the other two; unused ones are dead code, removed
  with the rest (MiniLM-L3, which reads only Y, lowers to the same 20 kernels as before).
- `RMSNormalization` (opset 23) over several axes, `LpNormalization`: missing.
- `Softmax` / `LogSoftmax` of float16 or bfloat16: computed in float32 (exp and the row sum in half precision
  were 1e-3 off on attention probabilities), as ONNX Runtime does.
"""

from __future__ import annotations


def _stash(x):
    """The type normalizations compute in (stash_type 1): float32 for narrower floats."""
    dtype = str(x.ty.dtype)
    return "float32" if dtype in ("float16", "bfloat16") else dtype


def _axes(x, attrs) -> list[int] | None:
    rank = int(x.ty.ndim)
    if rank < 0:
        return None
    axis = int(attrs.get("axis", -1))
    return list(range(axis + rank if axis < 0 else axis, rank))


def layer_normalization(bb, inputs, attrs):
    """Y = (x - mean) / sqrt(var + epsilon) * scale + bias over axes axis..rank-1; Mean and InvStdDev keep those
    axes as 1s and have the stash type, as ONNX says."""
    from tvm import relax

    op = relax.op
    x, scale = inputs[:2]
    bias = inputs[2] if len(inputs) > 2 else None
    axes = _axes(x, attrs)
    if axes is None or x.ty.shape is None or scale.ty.shape is None:
        return None  # unknown rank or shape: TVM's converter
    dtype, work = str(x.ty.dtype), _stash(x)
    eps = float(attrs.get("epsilon", 1e-5))
    xw = op.astype(x, work) if work != dtype else x
    mean = op.mean(xw, axis=axes, keepdims=True)
    centered = op.subtract(xw, mean)
    variance = op.mean(op.multiply(centered, centered), axis=axes, keepdims=True)
    inv_std = op.rsqrt(op.add(variance, relax.const(eps, work)))
    normalized_shape = [str(d) for d in list(x.ty.shape)[axes[0] :]] if axes else []
    if work == dtype and [str(d) for d in scale.ty.shape] == normalized_shape:
        if bias is None:
            bias = op.zeros_like(scale)
        y = op.nn.layer_norm(x, scale, bias, axes, eps)  # TVM's one-pass kernel, fused as before
    else:  # a broadcast scale, or a narrow type computed in float32
        y = op.multiply(op.multiply(centered, inv_std), op.astype(scale, work))
        if bias is not None:
            y = op.add(y, op.astype(bias, work))
        y = op.astype(y, dtype) if work != dtype else y
    return relax.Tuple([bb.emit(e) for e in (y, mean, inv_std)])


def rms_normalization(bb, inputs, attrs):
    """RMSNormalization (opset 23): x / sqrt(mean(x^2 over axes axis..rank-1) + epsilon) * scale, in float32 for
    narrower inputs (stash_type 1)."""
    from tvm import relax

    op = relax.op
    x, scale = inputs[:2]
    dtype = str(x.ty.dtype)
    rank = int(x.ty.ndim)
    if rank < 0:
        return None  # unknown rank: TVM's converter
    axis = int(attrs.get("axis", -1))
    axis = axis + rank if axis < 0 else axis
    eps = float(attrs.get("epsilon", 1e-5))
    work = "float32" if dtype in ("float16", "bfloat16") else dtype
    xw = op.astype(x, work) if work != dtype else x
    mean = op.mean(op.multiply(xw, xw), axis=list(range(axis, rank)), keepdims=True)
    inv = op.divide(relax.const(1, work), op.sqrt(op.add(mean, relax.const(eps, work))))
    y = op.multiply(op.multiply(xw, inv), op.astype(scale, work) if work != dtype else scale)
    return op.astype(y, dtype) if work != dtype else y


def lp_normalization(bb, inputs, attrs):
    """x / ||x||_p along one axis (p = 1 or 2); 0 where the norm is 0, as ONNX's reference does."""
    from tvm import relax

    op = relax.op
    x = inputs[0]
    p = int(attrs.get("p", 2))
    if p not in (1, 2) or int(x.ty.ndim) < 0:
        return None
    axis = int(attrs.get("axis", -1))
    norm = (
        op.sum(op.abs(x), axis=[axis], keepdims=True)
        if p == 1
        else op.sqrt(op.sum(op.multiply(x, x), axis=[axis], keepdims=True))
    )
    zero = relax.const(0, str(x.ty.dtype))
    return op.where(op.equal(norm, zero), zero, op.divide(x, norm))


def softmax(kind: str):
    def convert(bb, inputs, attrs):
        from tvm import relax

        from tuner.frontend.converters.attrs import OPSET

        x = inputs[0]
        dtype = str(x.ty.dtype)
        if _stash(x) == dtype or int(attrs.get(OPSET, 13)) < 13:  # before 13: over flattened trailing axes
            return None
        fn = relax.op.nn.softmax if kind == "softmax" else relax.op.nn.log_softmax
        return relax.op.astype(fn(relax.op.astype(x, "float32"), axis=int(attrs.get("axis", -1))), dtype)

    return convert
