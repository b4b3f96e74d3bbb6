"""A one-hot matrix multiplied by constant weights is a row lookup: `matmul(astype(equal(idx, arange(K))), W)`
-> `take(W, idx)`.

Exporters write embedding lookups this way (jax2tf's `one_hot` then a dense layer: magika builds a
(2048, 257) one-hot of its input bytes and multiplies it by (257, 64) weights, 34 MFLOP and a 2 MB intermediate
for what is 2048 row copies). Indices outside [0, K) match no column of the one-hot, so their rows are zero: the
lookup clips the index and multiplies by an in-range mask, both fused into the lookup's kernel.
"""

from __future__ import annotations


def one_hot_matmul_as_take(mod):
    from tvm.relax.dpl import is_const, is_op, wildcard

    from tuner.core.ir import rewrite_relax_functions

    index, arange, weights = wildcard(), is_const(), is_const()
    one_hot = is_op("relax.equal")(index, arange) | is_op("relax.equal")(arange, index)
    pattern = is_op("relax.matmul")(is_op("relax.astype")(one_hot), weights)

    def rewrite(expr, matches):
        lookup = _as_take(expr, matches[index], matches[arange], matches[weights])
        return expr if lookup is None else lookup

    return rewrite_relax_functions(mod, pattern, rewrite)


def _as_take(expr, index, arange, weights):
    """The lookup replacing `expr`, or None when the match is not a one-hot against arange(K) times (K, N)."""
    import numpy as np
    from tvm import relax

    c, w = arange.value.numpy(), weights.value.numpy()
    k = c.shape[-1] if c.ndim else 0
    if k == 0 or any(d != 1 for d in c.shape[:-1]) or not np.array_equal(c.reshape(-1), np.arange(k)):
        return None
    ty, out_ty = index.ty, expr.ty
    if not isinstance(ty, relax.TensorType) or ty.shape is None or not str(ty.dtype).startswith(("int", "uint")):
        return None
    dims = list(ty.shape.values)
    if len(dims) < max(c.ndim, 1) or getattr(dims[-1], "value", None) != 1:  # (..., 1) against (1.., K)
        return None
    if w.ndim != 2 or w.shape[0] != k or str(out_ty.dtype) != str(w.dtype):
        return None
    rows = relax.op.astype(relax.op.squeeze(index, [-1]), "int64")
    looked_up = relax.op.take(weights, rows, axis=0, mode="clip")
    inside = relax.op.logical_and(
        relax.op.greater_equal(rows, relax.const(0, "int64")), relax.op.less(rows, relax.const(k, "int64"))
    )
    return relax.op.multiply(looked_up, relax.op.expand_dims(relax.op.astype(inside, str(w.dtype)), -1))
