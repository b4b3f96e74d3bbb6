"""Loss ops (opset 12/13): NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss, which TVM 0.27 lacks. Models
exported with their loss (for evaluation, or a training graph's forward part) carry them.

Both pick, for every sample n and position d, the input at the target class: loss[n, d] = -x[n, target[n, d], d],
times weight[target] when a class weight is given; a target equal to `ignore_index` contributes 0 and, for the
mean, no weight. Reductions: none (the target's shape), sum, mean (the weighted mean when weights or an ignore
index are given, as ONNX's reference computes it).
"""

from __future__ import annotations


def _nll(x, target, weight, attrs):
    from tvm import relax

    op = relax.op
    dtype = str(x.ty.dtype)
    shape = [int(d) for d in x.ty.shape]
    tshape = [int(d) for d in target.ty.shape]
    n, c = shape[:2]
    d = 1
    for extent in shape[2:]:
        d *= extent
    x3 = op.reshape(x, [n, c, d])
    t2 = op.reshape(target, [n, d])
    tdtype = str(target.ty.dtype)
    ignore = attrs.get("ignore_index")
    valid = op.not_equal(t2, relax.const(int(ignore), tdtype)) if ignore is not None else None
    safe = op.minimum(op.maximum(t2, relax.const(0, tdtype)), relax.const(c - 1, tdtype))  # np.take(mode="clip")
    picked = op.squeeze(op.gather_elements(x3, op.expand_dims(safe, 1), axis=1), [1])
    zero = relax.const(0, dtype)
    loss = op.negative(picked)
    w = op.take(weight, safe, axis=0) if weight is not None else None
    if valid is not None:
        loss = op.where(valid, loss, zero)
        w = op.where(valid, w if w is not None else relax.const(1, dtype), zero)
    if w is not None:
        loss = op.multiply(loss, w)
    reduction = attrs.get("reduction", b"mean")
    reduction = reduction.decode() if isinstance(reduction, bytes) else reduction
    if reduction == "none":
        return op.reshape(loss, tshape)
    if reduction == "sum":
        return op.sum(loss)
    if w is not None:
        return op.divide(op.sum(loss), op.sum(w))
    return op.mean(loss)


def _static(*exprs) -> bool:
    import tvm

    return all(e.ty.shape is not None and all(isinstance(s, tvm.tirx.IntImm) for s in e.ty.shape) for e in exprs)


def negative_log_likelihood_loss(bb, inputs, attrs):
    x, target = inputs[:2]
    weight = inputs[2] if len(inputs) > 2 else None
    if not _static(x, target):
        return None
    return _nll(x, target, weight, attrs)


def softmax_cross_entropy_loss(bb, inputs, attrs):
    """The NLL of log_softmax over the class axis (1); its second output is that log-probability."""
    from tvm import relax

    x, target = inputs[:2]
    weight = inputs[2] if len(inputs) > 2 else None
    if not _static(x, target):
        return None
    log_prob = bb.normalize(relax.op.nn.log_softmax(x, axis=1))  # typed, for _nll's shape reads
    return relax.Tuple([bb.emit(_nll(log_prob, target, weight, attrs)), log_prob])
