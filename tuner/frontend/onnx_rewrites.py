"""Rewrites on the ONNX graph before import: batch norms folded into the convs they follow, ConvTranspose as a
conv where it is one, subnormal weights flushed to zero."""

from __future__ import annotations


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
    from tuner.frontend.checks import default_opset

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


def flush_subnormal_weights(model) -> dict[str, int]:
    """Set subnormal float weights (initializers and Constant tensors) to zero, in place: {tensor: values}.

    On x86 every multiply with a subnormal operand takes a microcode assist, ~100x a normal one, and trained
    checkpoints carry such weights (weight decay, pruning): a real text detector's 768->384 1x1 conv held 24%
    subnormal weights and took 64% of its time. A subnormal is below 1.2e-38 in fp32 (6.1e-5 in fp16): its
    product with any activation is lost next to the other terms of a dot product, so outputs stay within
    verification tolerances."""
    import numpy as np
    from onnx import numpy_helper

    flushed = {}
    for tensor in _weight_tensors(model.graph):
        if tensor.data_type not in (1, 10, 11):  # float, float16, double
            continue
        array = numpy_helper.to_array(tensor)
        tiny = (array != 0) & (np.abs(array) < np.finfo(array.dtype).tiny)
        count = int(tiny.sum())
        if count:
            fixed = np.where(tiny, np.zeros((), array.dtype), array)
            tensor.CopyFrom(numpy_helper.from_array(fixed, tensor.name))
            flushed[tensor.name] = count
    return flushed


def _weight_tensors(graph):
    """Every initializer and Constant value of the graph and its subgraphs (If/Loop bodies)."""
    yield from graph.initializer
    for node in graph.node:
        for attr in node.attribute:
            if node.op_type == "Constant" and attr.name == "value":
                yield attr.t
            for sub in ([attr.g] if attr.type == attr.GRAPH else []) + list(attr.graphs):
                yield from _weight_tensors(sub)
