"""ONNX RotaryEmbedding (opset 23) and Swish (opset 24), which TVM 0.27's importer lacks, as plain Relax ops that
fuse like any element-wise chain (RotaryEmbedding: two slices, four products and a concat per head).

RotaryEmbedding follows the ONNX reference: 4-D input [batch, heads, seq, head] or 3-D [batch, seq, hidden] with
`num_heads`; `rotary_embedding_dim` (0: the whole head) rotates the first dims and passes the rest through; halves
or `interleaved` pairs; caches indexed by `position_ids` when given, else already [batch, seq, dim/2].
"""

from __future__ import annotations

from ..errors import TunerError


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
