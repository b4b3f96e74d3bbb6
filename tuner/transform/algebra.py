"""Graph algebra before fusion: the constant rewrites ONNX Runtime applies before it picks kernels.

    ONNX, at preparation:  fold_batch_norms  (Conv[+bias] -> BatchNormalization with constant parameters)
                           conv_transposes_as_convs  (k x k ConvTranspose, stride k -> 1x1 Conv + DepthToSpace)
    Relax, before fusion:  [FoldConstant -> FoldBatchnormToConv2D -> FoldConstant, where a batch_norm is left]
                           -> drop_dropout -> SumToAdd -> one_hot_matmul_as_take (tuner/one_hot.py)
                           -> fold_attention_scale (tuner/transform/attention_scale.py)
                           -> residual_into_epilogue (tuner/transform/residual_epilogue.py)

Batch-norm folded into the convolution's weights and bias leaves one add per output element where the decomposed
form computes subtract, divide, multiply and add (ResNet-50-class CNNs: 53 of them). The first FoldConstant is
what makes folding possible at all: exporters often build BN statistics from ConstantOfShape or Cast nodes, and
TVM's FoldBatchnormToConv2D only matches when they are already constants. An n-ary ONNX `Sum` imports as
broadcast_to + stack + sum (a copy of every operand); as a chain of adds it fuses into the producer's epilogue
like any residual add. Dropout is the identity in inference, but Relax keeps it as a call returning (output,
mask), and TVM 0.27's ConvertLayout fails on any graph holding one (SqueezeNet, Inception v1 kept every conv
between two transposes for it).

Folding in ONNX first keeps the conv node's name (plans and reports map kernels back to it) and covers convs with
a bias, which TVM's pattern (conv2d directly into batch_norm) does not; the Relax pass catches statistics that
only become constants after folding.
"""

from __future__ import annotations

from tuner.transform.dataflow_facts import same_shape


def GraphAlgebra():  # noqa: N802  (a pass, named as TVM names its passes)
    """The inference-time graph simplifications, as one pass; a no-op on modules with nothing to fold."""
    import tvm

    return tvm.transform.module_pass(lambda mod, ctx: graph_algebra(mod), opt_level=0, name="GraphAlgebra")


def graph_algebra(mod):
    """Constants are folded before fusion only where a batch-norm is left to fold (ONNX preparation folds the
    ones it can see): folding everything this early also folds the shape computations of dynamic ops, and
    TVM 0.27 then legalizes a dynamic strided_slice into a call to a shape function it never defines."""
    import tvm
    from tvm import relax

    if _calls(mod, "relax.nn.batch_norm"):
        seq = [relax.transform.FoldConstant(), relax.transform.FoldBatchnormToConv2D(), relax.transform.FoldConstant()]
        mod = tvm.transform.Sequential(seq)(mod)
    from tuner.transform.attention_scale import fold_attention_scale
    from tuner.transform.one_hot import one_hot_matmul_as_take
    from tuner.transform.residual_epilogue import residual_into_epilogue

    return residual_into_epilogue(fold_attention_scale(one_hot_matmul_as_take(sum_to_add(drop_dropout(mod)))))


def drop_dropout(mod):
    """`dropout(x)[0]` -> `x` (the importer emits dropout for an inference-mode ONNX Dropout; a training-mode one
    is refused at import). A read of the mask keeps its dropout call."""
    from tvm.relax.dpl import is_op, is_tuple_get_item, wildcard

    from tuner.core.ir import rewrite_relax_functions

    dropout = is_op("relax.nn.dropout")(wildcard())
    return rewrite_relax_functions(mod, is_tuple_get_item(dropout, 0), lambda _expr, matches: matches[dropout].args[0])


def _calls(mod, op_name: str) -> bool:
    from tvm import relax

    found = []
    for func in mod.functions.values():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(
                func.body,
                lambda e: (
                    found.append(1) if isinstance(e, relax.Call) and getattr(e.op, "name", "") == op_name else None
                ),
            )
    return bool(found)


def SumToAdd():  # noqa: N802
    """`sum(stack([a, b, ...], axis=0), axis=0)` (ONNX Sum, same-shape operands) -> `a + b + ...`, after dropping
    the importer's identity `broadcast_to`s."""
    import tvm

    return tvm.transform.module_pass(lambda mod, ctx: sum_to_add(mod), opt_level=0, name="SumToAdd")


def sum_to_add(mod):
    from tvm import relax
    from tvm.relax.dpl import is_op, rewrite_call, wildcard

    operands = wildcard()
    stacked = is_op("relax.stack")(operands)
    pattern = is_op("relax.sum")(stacked)
    broadcast = is_op("relax.broadcast_to")(wildcard(), wildcard())

    def rewrite(expr, matches):
        stack_call = matches[stacked]
        if int(stack_call.attrs.axis) != 0 or [int(a) for a in (expr.attrs.axis or [])] != [0] or expr.attrs.keepdims:
            return expr
        items = stack_call.args[0]
        if not isinstance(items, relax.Tuple) or len(items.fields) < 2:
            return expr
        fields = list(items.fields)
        if not all(same_shape(f, expr) for f in fields):
            return expr  # operands that broadcast against each other (or shapes unknown): keep the stack
        out = fields[0]
        for f in fields[1:]:
            out = relax.op.add(out, f)
        return out

    out = mod
    for gv, func in mod.functions.items():
        if isinstance(func, relax.Function):
            new = rewrite_call(broadcast, lambda expr, _: _through_same_shape_broadcast(expr), func)
            new = rewrite_call(pattern, rewrite, new)
            if not new.same_as(func):
                out = out.clone() if out is mod else out
                out[gv] = new
    return out


def _through_same_shape_broadcast(expr):
    """The operand of a `broadcast_to` that does not change its shape (how the importer aligns Sum inputs)."""
    from tvm import relax

    if isinstance(expr, relax.Call) and getattr(expr.op, "name", "") == "relax.broadcast_to":
        inner = expr.args[0]
        if same_shape(inner, expr):
            return inner
    return expr
