"""ONNX Attention and RotaryEmbedding (opset 23) and Swish (opset 24), which TVM 0.27's importer lacks, as plain
Relax ops that fuse like any matmul and element-wise chain (RotaryEmbedding: two slices, four products and a concat
per head; Attention: two batched matmuls around a softmax).

RotaryEmbedding follows the ONNX reference: 4-D input [batch, heads, seq, head] or 3-D [batch, seq, hidden] with
`num_heads`; `rotary_embedding_dim` (0: the whole head) rotates the first dims and passes the rest through; halves
or `interleaved` pairs; caches indexed by `position_ids` when given, else already [batch, seq, dim/2].
"""

from __future__ import annotations

import numpy as np

from tuner.core.errors import TunerError


def _op():
    from tvm import relax

    return relax.op


def _shape(x) -> list[int]:
    if x.ty.shape is None:
        raise TunerError("RotaryEmbedding needs static shapes", "pin the input shapes with --input-shape")
    return [int(d) for d in x.ty.shape]


def _last(x, begin: int, end: int, step: int = 1):
    return _op().strided_slice(x, axes=[3], begin=[begin], end=[end], strides=[step])


def rotary_embedding(bb, inputs, attrs):
    op = _op()
    x, cos, sin = inputs[:3]
    positions = inputs[3] if len(inputs) > 3 else None
    interleaved = int(attrs.get("interleaved", 0))
    shape = _shape(x)
    if len(shape) == 4:
        y = bb.emit(op.permute_dims(x, [0, 2, 1, 3]))  # [batch, seq, heads, head]
        head = shape[3]
    elif len(shape) == 3:
        heads = int(attrs.get("num_heads", 0))
        if not heads or shape[2] % heads:
            raise TunerError(f"RotaryEmbedding on a 3-D input needs num_heads dividing {shape[2]} (got {heads})")
        head = shape[2] // heads
        y = bb.emit(op.reshape(x, [shape[0], shape[1], heads, head]))
    else:
        raise TunerError(f"RotaryEmbedding input of rank {len(shape)}: 3-D or 4-D expected")
    dim = int(attrs.get("rotary_embedding_dim", 0)) or head
    half = dim // 2
    if positions is not None:  # caches [max_pos, dim/2] -> [batch, seq, dim/2]
        cos, sin = op.take(cos, positions, axis=0), op.take(sin, positions, axis=0)
    cos, sin = bb.emit(op.expand_dims(cos, 2)), bb.emit(op.expand_dims(sin, 2))
    rotated = _last(y, 0, dim) if dim < head else y
    if interleaved:
        x1, x2 = _last(rotated, 0, dim, 2), _last(rotated, 1, dim, 2)
    else:
        x1, x2 = _last(rotated, 0, half), _last(rotated, half, dim)
    x1, x2 = bb.emit(x1), bb.emit(x2)
    real = op.subtract(op.multiply(cos, x1), op.multiply(sin, x2))
    imag = op.add(op.multiply(sin, x1), op.multiply(cos, x2))
    if interleaved:
        pairs = op.concat([op.expand_dims(real, -1), op.expand_dims(imag, -1)], axis=-1)
        out = op.reshape(pairs, [*_shape(y)[:3], dim])
    else:
        out = op.concat([real, imag], axis=-1)
    if dim < head:
        out = op.concat([out, _last(y, dim, head)], axis=-1)
    out = bb.emit(out)
    return op.reshape(out, shape) if len(shape) == 3 else op.permute_dims(out, [0, 2, 1, 3])


def swish(bb, inputs, attrs):
    """x * sigmoid(alpha * x)."""
    op = _op()
    from tvm import relax

    x = inputs[0]
    alpha = float(attrs.get("alpha", 1.0))
    scaled = x if alpha == 1.0 else op.multiply(x, relax.const(alpha, str(x.ty.dtype)))
    return op.multiply(x, op.sigmoid(scaled))


def attention(bb, inputs, attrs):
    """ONNX Attention (opset 23/24), after the ONNX reference: Q, K, V as [batch, heads, seq, head] or 3-D
    [batch, seq, hidden] with q_num_heads/kv_num_heads; past key/value concatenated along the sequence; grouped KV
    heads repeated ([h0, h0, h1, h1, ...]); scale (default 1/sqrt(head)) applied as sqrt(scale) to Q and K; softcap
    on the scores; additive or boolean mask (shorter masks padded as masked), causal bottom-right, sliding window,
    nonpad_kv_seqlen; a fully masked row gives zeros. Outputs Y, present_key, present_value and the
    qk_matmul_output of the mode. ONNX Runtime's contrib Attention (attribute num_heads) is left to TVM's converter."""
    if "num_heads" in attrs:
        return None
    op = _op()
    q, k, v = (_heads(bb, x, attrs.get(n)) for x, n in zip(inputs[:3], ("q_num_heads", "kv_num_heads", "kv_num_heads")))
    mask, past_k, past_v = (inputs[i] if len(inputs) > i else None for i in (3, 4, 5))
    nonpad = inputs[6] if len(inputs) > 6 else None
    if past_k is not None:
        k, v = bb.emit(op.concat([past_k, k], axis=2)), bb.emit(op.concat([past_v, v], axis=2))
    present_k, present_v = k, v
    reps = _shape(q)[1] // _shape(k)[1]
    if reps > 1:  # grouped KV heads: [h0, h0, h1, h1, ...]
        k, v = bb.emit(op.repeat(k, reps, axis=1)), bb.emit(op.repeat(v, reps, axis=1))
    dtype = out_dtype = str(q.ty.dtype)
    if dtype in ("float16", "bfloat16"):  # scores, softmax and the weighted sum in float32, rounded once at the end
        dtype = "float32"
        q, k, v = (bb.emit(op.astype(x, dtype)) for x in (q, k, v))
        if mask is not None and str(mask.ty.dtype) != "bool":
            mask = bb.emit(op.astype(mask, dtype))
    (batch, _, q_len, head), kv_len = _shape(q), _shape(k)[2]
    scale = float(attrs.get("scale", 0.0)) or 1.0 / np.sqrt(head)
    root = _const(np.sqrt(scale), dtype)
    scores = bb.emit(op.matmul(op.multiply(q, root), op.permute_dims(op.multiply(k, root), [0, 1, 3, 2])))
    softcap = float(attrs.get("softcap", 0.0))
    if softcap > 0:
        scores = bb.emit(op.multiply(op.tanh(op.divide(scores, _const(softcap, dtype))), _const(softcap, dtype)))
    bias = _bias(bb, mask, attrs, past_k, nonpad, q_len, kv_len, dtype)
    with_bias = bb.emit(op.add(scores, bias)) if bias is not None else scores
    probs = bb.emit(op.nn.softmax(with_bias, axis=-1))
    if bias is not None:  # a row with no attendable key: zeros, not softmax's NaNs
        # "at most the lowest finite value", not "== -inf": TVM's max reduction starts from the lowest finite
        # value, so the max of a row of -inf is that value (the ONNX nan_robustness cases came out NaN)
        lowest = _const(np.finfo(dtype).min, dtype)
        masked = op.less_equal(op.max(bias, axis=[-1], keepdims=True), lowest)
        probs = bb.emit(op.where(masked, _const(0.0, dtype), probs))
    y = bb.emit(op.matmul(probs, v))
    if len(_shape(inputs[0])) == 3:
        y = bb.emit(op.reshape(bb.emit(op.permute_dims(y, [0, 2, 1, 3])), [batch, q_len, -1]))
    mode = int(attrs.get("qk_matmul_output_mode", 0))
    qk = {2: with_bias, 3: probs}.get(mode, scores)
    if out_dtype != dtype:
        y, qk = bb.emit(op.astype(y, out_dtype)), bb.emit(op.astype(qk, out_dtype))
    from tvm import relax

    return relax.Tuple([y, present_k, present_v, qk])


def _const(value, dtype: str):
    from tvm import relax

    return relax.const(np.asarray(value, dtype=dtype), dtype)


def _heads(bb, x, num_heads):
    """[batch, heads, seq, head] from a 4-D input as it is, or from [batch, seq, heads * head]."""
    shape = _shape(x)
    if len(shape) == 4:
        return x
    if len(shape) != 3 or not num_heads or shape[2] % int(num_heads):
        raise TunerError(f"Attention input of shape {shape}: 4-D, or 3-D with q_num_heads/kv_num_heads dividing it")
    split = _op().reshape(x, [shape[0], shape[1], int(num_heads), shape[2] // int(num_heads)])
    return bb.emit(_op().permute_dims(split, [0, 2, 1, 3]))


def _bias(bb, mask, attrs, past_k, nonpad, q_len: int, kv_len: int, dtype: str):
    """The additive bias on the scores (0 attend, -inf masked), or None when nothing is masked: the mask, then the
    causal frontier and sliding window (query i attends key j when 0 <= i + offset - j for causal, and within the
    window sizes), offset by the past length, or per batch by nonpad_kv_seqlen - q_len; keys past nonpad masked."""
    op = _op()
    bias = None
    if mask is not None:
        shape = _shape(mask)
        width = shape[-1]
        if str(mask.ty.dtype) == "bool":
            mask = op.where(mask, _const(0.0, dtype), _const(-np.inf, dtype))
        if width < kv_len:  # a shorter mask masks the keys it does not cover
            pad = np.full([*shape[:-1], kv_len - width], -np.inf, dtype=dtype)
            mask = op.concat([mask, _const(pad, dtype)], axis=-1)
        bias = bb.emit(mask)
    causal = bool(int(attrs.get("is_causal", 0)))
    left, right = int(attrs.get("left_window_size", -1)), int(attrs.get("right_window_size", -1))

    def allowed(diff, both, less_equal):  # diff = i + offset - j, numpy or Relax
        ok = None
        for wanted, cond in ((causal, lambda: less_equal(0, diff)), (left >= 0, lambda: less_equal(diff, left)),
                             (right >= 0, lambda: less_equal(-right, diff))):  # fmt: skip
            if wanted:
                ok = cond() if ok is None else both(ok, cond())
        return ok

    i, j = np.arange(q_len).reshape(q_len, 1), np.arange(kv_len).reshape(1, kv_len)
    if nonpad is None:
        offset = _shape(past_k)[2] if past_k is not None else 0
        ok = allowed(i + offset - j, np.logical_and, lambda a, b: np.less_equal(a, b))
        if ok is not None:
            frontier = _const(np.where(ok, 0.0, -np.inf), dtype)
            bias = frontier if bias is None else bb.emit(op.add(bias, frontier))
        return bias
    lens = bb.emit(op.reshape(bb.emit(op.astype(nonpad, "int64")), [-1, 1, 1, 1]))
    keys = _const(j.reshape(1, 1, 1, kv_len), "int64")
    diff = op.subtract(
        op.add(_const(i.reshape(1, 1, q_len, 1), "int64"), op.subtract(lens, _const(q_len, "int64"))), keys
    )

    def le(a, b):
        return op.less_equal(*(x if not isinstance(x, int) else _const(x, "int64") for x in (a, b)))

    ok = op.less(keys, lens)  # keys past nonpad_kv_seqlen[b] are padding
    frontier = allowed(diff, op.logical_and, le)
    ok = ok if frontier is None else op.logical_and(ok, frontier)
    pad = op.where(ok, _const(0.0, dtype), _const(-np.inf, dtype))
    return bb.emit(pad if bias is None else op.add(bias, pad))
