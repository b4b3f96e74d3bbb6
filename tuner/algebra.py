"""Graph algebra before fusion: the constant rewrites ONNX Runtime applies before it picks kernels.

    ONNX, at preparation:  fold_batch_norms  (Conv[+bias] -> BatchNormalization with constant parameters)
                           conv_transposes_as_convs  (k x k ConvTranspose, stride k -> 1x1 Conv + DepthToSpace)
    Relax, before fusion:  [FoldConstant -> FoldBatchnormToConv2D -> FoldConstant, where a batch_norm is left]
                           -> drop_dropout -> SumToAdd -> one_hot_matmul_as_take (tuner/one_hot.py)

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
    from .one_hot import one_hot_matmul_as_take

    return one_hot_matmul_as_take(sum_to_add(drop_dropout(mod)))


def drop_dropout(mod):
    """`dropout(x)[0]` -> `x` (the importer emits dropout for an inference-mode ONNX Dropout; a training-mode one
    is refused at import). A read of the mask keeps its dropout call."""
    from tvm.relax.dpl import is_op, is_tuple_get_item, wildcard

    from .ir import rewrite_relax_functions

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
    """Fold each inference BatchNormalization that alone consumes a Conv's (or a group-1 ConvTranspose's) output
    into its weights and bias, in place, when all of them are initializers. Returns "bn -> conv" for each fold."""
    import numpy as np
    from onnx import numpy_helper

    graph = model.graph
    inits = {**_constant_nodes(graph), **{t.name: t for t in graph.initializer}}
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
        attrs = _attrs(bn)
        if attrs.get("training_mode", 0):
            continue
        conv = producer.get(bn.input[0])
        if conv is None or conv.op_type not in ("Conv", "ConvTranspose") or consumers.get(bn.input[0]) != 1:
            continue
        axis = 1 if conv.op_type == "ConvTranspose" else 0  # the output-channel axis of the weight
        if axis and _attrs(conv).get("group", 1) != 1:
            continue
        params = [inits.get(n) for n in (conv.input[1], *bn.input[1:])]
        bias = inits.get(conv.input[2]) if len(conv.input) > 2 and conv.input[2] else None
        if any(p is None for p in params) or (len(conv.input) > 2 and conv.input[2] and bias is None):
            continue
        w, scale, shift, mean, var = (numpy_helper.to_array(p) for p in params)
        if w.dtype not in (np.float32, np.float64) or w.ndim < 3 or scale.shape != (w.shape[axis],):
            continue
        s = scale / np.sqrt(var + attrs.get("epsilon", 1e-5))
        b = numpy_helper.to_array(bias) if bias is not None else np.zeros(w.shape[axis], w.dtype)
        new_w = (w * s.reshape([-1 if i == axis else 1 for i in range(w.ndim)])).astype(w.dtype)
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
        _drop_unused_constants(graph)
    return folded


def _drop_unused_constants(graph) -> None:
    """Remove initializers and Constant nodes nothing reads any more (subgraphs included)."""
    used = _used_names(graph) | {o.name for o in graph.output}
    unused = [t for t in graph.initializer if t.name not in used]
    for t in unused:
        graph.initializer.remove(t)
    for vi in [vi for vi in graph.input if vi.name in {t.name for t in unused}]:
        graph.input.remove(vi)  # old exporters list initializers as inputs too
    for node in [n for n in graph.node if n.op_type in ("Constant", "ConstantOfShape") and n.output[0] not in used]:
        graph.node.remove(node)


def _used_names(graph) -> set:
    """Every name a node reads, in this graph and in the bodies of its If/Loop/Scan nodes."""
    names = set()
    for node in graph.node:
        names.update(node.input)
        for attr in node.attribute:
            for sub in [attr.g] if attr.HasField("g") else list(attr.graphs):
                names |= _used_names(sub)
    return names


def _attrs(node) -> dict:
    from onnx import helper

    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def conv_transposes_as_convs(model) -> list[str]:
    """ConvTranspose whose kernel equals its stride (k x k, stride k, no padding, dilation or groups: the 2x
    upsampling of U-Net and DB-style decoders) -> a 1x1 Conv to Cout*k*k channels + DepthToSpace(k, DCR), in
    place. The windows do not overlap, so each input pixel writes one k x k output block; TVM lowers ConvTranspose
    as a convolution over the zero-dilated input (k*k times the work, NCHW only), the 1x1 Conv is a matmul that
    takes NHWC, packing and tuning like any other. Returns the rewritten node names."""
    import numpy as np
    from onnx import helper, numpy_helper

    graph = model.graph
    from .onnx_checks import default_opset

    if default_opset(model) < 11:  # DepthToSpace's mode attribute
        return []
    inits = {t.name: t for t in graph.initializer}
    consts = {**_constant_nodes(graph), **inits}  # exporters give weights as initializers or Constant nodes
    rewritten, nodes = [], []
    for node in graph.node:
        w = consts.get(node.input[1]) if node.op_type == "ConvTranspose" and len(node.input) > 1 else None
        bias = consts.get(node.input[2]) if w is not None and len(node.input) > 2 and node.input[2] else None
        k = _block_size(node, w)
        if k is None or (len(node.input) > 2 and node.input[2] and bias is None):
            nodes.append(node)
            continue
        wt = numpy_helper.to_array(w)  # (Cin, Cout, k, k)
        cin, cout = wt.shape[:2]
        name = node.name or node.output[0]
        wname = _fresh(inits, f"{name}.as_conv_w")
        inits[wname] = numpy_helper.from_array(wt.transpose(2, 3, 1, 0).reshape(k * k * cout, cin, 1, 1), wname)
        graph.initializer.append(inits[wname])
        conv_in = [node.input[0], wname]
        if bias is not None:
            bname = _fresh(inits, f"{name}.as_conv_b")
            inits[bname] = numpy_helper.from_array(np.tile(numpy_helper.to_array(bias), k * k), bname)
            graph.initializer.append(inits[bname])
            conv_in.append(bname)
        blocks = f"{node.output[0]}.blocks"
        nodes.append(helper.make_node("Conv", conv_in, [blocks], name=name, kernel_shape=[1, 1]))
        nodes.append(
            helper.make_node(
                "DepthToSpace", [blocks], [node.output[0]], f"{name}.depth_to_space", blocksize=k, mode="DCR"
            )
        )
        rewritten.append(name)
    if rewritten:
        del graph.node[:]
        graph.node.extend(nodes)
        _drop_unused_constants(graph)
    return rewritten


def _constant_nodes(graph) -> dict:
    """{output: TensorProto} of the graph's Constant nodes that carry a tensor `value`, and of its ConstantOfShape
    nodes with a constant shape (exporters build batch-norm statistics that way; the ONNX test zoo's light models
    every weight)."""
    import numpy as np
    from onnx import helper, numpy_helper

    found = {
        n.output[0]: helper.get_attribute_value(n.attribute[0])
        for n in graph.node
        if n.op_type == "Constant" and len(n.attribute) == 1 and n.attribute[0].name == "value"
    }
    shapes = {**{t.name: t for t in graph.initializer}, **found}
    for n in graph.node:
        if n.op_type == "ConstantOfShape" and len(n.input) == 1 and n.input[0] in shapes:
            fill = next((helper.get_attribute_value(a) for a in n.attribute if a.name == "value"), None)
            value = numpy_helper.to_array(fill).reshape(-1) if fill is not None else np.zeros(1, "float32")
            shape = numpy_helper.to_array(shapes[n.input[0]]).astype("int64").reshape(-1)
            found[n.output[0]] = numpy_helper.from_array(np.full(shape, value[0], value.dtype), n.output[0])
    return found


def _block_size(node, weight) -> int | None:
    """k when a ConvTranspose is a non-overlapping k x k upsampling with a constant float 4-D weight, else None."""
    if weight is None or len(weight.dims) != 4 or weight.data_type not in (1, 11):  # FLOAT, DOUBLE
        return None
    a = _attrs(node)
    k = list(weight.dims[2:])
    same = list(a.get("kernel_shape", k)) == k and k[0] == k[1] and list(a.get("strides", [1, 1])) == k
    plain = (
        a.get("group", 1) == 1
        and set(a.get("dilations", [1])) == {1}
        and not any(a.get("pads", []))
        and not any(a.get("output_padding", []))
        and "output_shape" not in a
        and a.get("auto_pad", b"NOTSET") in (b"NOTSET", b"VALID", "NOTSET", "VALID")
    )
    return int(k[0]) if same and plain and k[0] > 1 else None


def _fresh(taken: dict, name: str) -> str:
    k, out = 0, name
    while out in taken:
        k += 1
        out = f"{name}{k}"
    return out
