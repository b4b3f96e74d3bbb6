"""Graph algebra before fusion: the constant rewrites ONNX Runtime applies before it picks kernels.

    ONNX, at preparation:  fold_batch_norms  (Conv[+bias] -> BatchNormalization with constant parameters)
    Relax, before fusion:  [FoldConstant -> FoldBatchnormToConv2D -> FoldConstant, where a batch_norm is left]
                           -> SumToAdd

Batch-norm folded into the convolution's weights and bias leaves one add per output element where the decomposed
form computes subtract, divide, multiply and add (ResNet-50-class CNNs: 53 of them). The first FoldConstant is
what makes folding possible at all: exporters often build BN statistics from ConstantOfShape or Cast nodes, and
TVM's FoldBatchnormToConv2D only matches when they are already constants. An n-ary ONNX `Sum` imports as
broadcast_to + stack + sum (a copy of every operand); as a chain of adds it fuses into the producer's epilogue
like any residual add.

Folding in ONNX first keeps the conv node's name (plans and reports map kernels back to it) and covers convs with
a bias, which TVM's pattern (conv2d directly into batch_norm) does not; the Relax pass catches statistics that
only become constants after folding.
"""

from __future__ import annotations


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
    return sum_to_add(mod)


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
        shape = _static_shape(expr)
        if shape is None or any(_static_shape(f) != shape for f in fields):
            return expr  # operands that broadcast against each other: keep the stack
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
        if _static_shape(inner) == _static_shape(expr):
            return inner
    return expr


def _static_shape(expr):
    from tvm import relax

    ty = getattr(expr, "ty", None)  # TVM 0.27's struct info; a matched Call may not be normalized yet
    if not isinstance(ty, relax.TensorType) or ty.shape is None:
        return None
    try:
        return tuple(int(d) for d in ty.shape.values)
    except (TypeError, AttributeError):
        return None


def fold_batch_norms(model) -> list[str]:
    """Fold each inference BatchNormalization that alone consumes a Conv's output into that Conv's weights and
    bias, in place, when all of them are initializers. Returns "bn -> conv" for each fold."""
    import numpy as np
    from onnx import helper, numpy_helper

    graph = model.graph
    inits = {t.name: t for t in graph.initializer}
    consumers: dict[str, int] = {}
    for node in graph.node:
        for name in node.input:
            consumers[name] = consumers.get(name, 0) + 1
    for out in graph.output:
        consumers[out.name] = consumers.get(out.name, 0) + 1
    producer = {out: node for node in graph.node for out in node.output}
    folded, drop = [], set()
    for bn in graph.node:
        if bn.op_type != "BatchNormalization" or len(bn.input) != 5 or len([o for o in bn.output if o]) != 1:
            continue
        attrs = {a.name: helper.get_attribute_value(a) for a in bn.attribute}
        if attrs.get("training_mode", 0):
            continue
        conv = producer.get(bn.input[0])
        if conv is None or conv.op_type != "Conv" or consumers.get(bn.input[0]) != 1:
            continue
        params = [inits.get(n) for n in (conv.input[1], *bn.input[1:])]
        bias = inits.get(conv.input[2]) if len(conv.input) > 2 and conv.input[2] else None
        if any(p is None for p in params) or (len(conv.input) > 2 and conv.input[2] and bias is None):
            continue
        w, scale, shift, mean, var = (numpy_helper.to_array(p) for p in params)
        if w.dtype not in (np.float32, np.float64) or w.ndim < 3 or scale.shape != (w.shape[0],):
            continue
        s = scale / np.sqrt(var + attrs.get("epsilon", 1e-5))
        b = numpy_helper.to_array(bias) if bias is not None else np.zeros(w.shape[0], w.dtype)
        new_w = (w * s.reshape(-1, *([1] * (w.ndim - 1)))).astype(w.dtype)
        new_b = ((b - mean) * s + shift).astype(w.dtype)
        wname, bname = _fresh(inits, f"{conv.name or conv.output[0]}.folded_w"), None
        bname = _fresh(inits, f"{conv.name or conv.output[0]}.folded_b")
        for name, arr in ((wname, new_w), (bname, new_b)):
            t = numpy_helper.from_array(arr, name)
            graph.initializer.append(t)
            inits[name] = t
        conv.input[1:] = [wname, bname]
        conv.output[0] = bn.output[0]
        drop.add(id(bn))
        folded.append(f"{bn.name or bn.output[0]} -> {conv.name or conv.output[0]}")
    if drop:
        keep = [n for n in graph.node if id(n) not in drop]
        del graph.node[:]
        graph.node.extend(keep)
        used = {name for node in graph.node for name in node.input} | {o.name for o in graph.output}
        unused = [t for t in graph.initializer if t.name not in used]
        for t in unused:
            graph.initializer.remove(t)
        for vi in [vi for vi in graph.input if vi.name in {t.name for t in unused}]:
            graph.input.remove(vi)  # old exporters list initializers as inputs too
    return folded


def _fresh(taken: dict, name: str) -> str:
    k, out = 0, name
    while out in taken:
        k += 1
        out = f"{name}{k}"
    return out
