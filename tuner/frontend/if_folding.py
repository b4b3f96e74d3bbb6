"""Fold `If` nodes whose condition is known at compile time: the branch taken replaces the node.

Exporters turn Python control flow on a sample rate or a tensor's rank into `If` (Silero VAD: one model per
sample rate, each with `If`s on its input's rank inside). Once `--const sr=16000` pins the rate and the input
shapes are bound, every condition is a constant, but TVM's importer converts both branches (neither builds:
Relax has no control flow over tensors of different shapes) and onnxsim refuses the nested graph. Here a
condition is evaluated with ONNX's reference implementation from the constants it depends on, where a graph
input may only be reached through `Shape`/`Size` of a statically shaped tensor; the taken branch's nodes are
spliced in at the `If`'s place (its outputs renamed to the `If`'s), and folding repeats for the `If`s that
brought in.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

_SHAPE_LEAVES = ("Shape", "Size")


def fold_constant_ifs(model: onnx.ModelProto) -> list[str]:
    """Fold every top-level If with a compile-time condition (repeatedly); returns 'node -> branch' notes."""
    notes: list[str] = []
    if not any(n.op_type == "If" for n in model.graph.node):
        return notes  # no shape inference for graphs without an If
    while True:
        shapes = _static_shapes(model)
        for index, node in enumerate(model.graph.node):
            if node.op_type != "If":
                continue
            taken = _condition(model.graph, node.input[0], shapes)
            if taken is None:
                continue
            branch = next(a.g for a in node.attribute if a.name == ("then_branch" if taken else "else_branch"))
            _splice(model.graph, index, node, branch)
            notes.append(f"{node.name or node.output[0]} -> {'then' if taken else 'else'}")
            break
        else:
            return notes


def _static_shapes(model) -> dict[str, list[int]]:
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False, data_prop=True)
    except Exception:
        inferred = model
    g = inferred.graph
    out = {}
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        dims = vi.type.tensor_type.shape.dim if vi.type.HasField("tensor_type") else []
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape"):
            if all(d.HasField("dim_value") for d in dims):
                out[vi.name] = [d.dim_value for d in dims]
    return out


def _condition(graph, name: str, shapes: dict) -> bool | None:
    """The condition's value, or None when it depends on run-time values (or cannot be evaluated here)."""
    from onnx.reference import ReferenceEvaluator

    producer = {o: n for n in graph.node for o in n.output}
    inits = {t.name: t for t in graph.initializer}
    needed, leaves, stack = set(), {}, [name]
    while stack:
        t = stack.pop()
        if t in inits or t in leaves or not t:
            continue
        node = producer.get(t)
        if node is None:
            return None  # a graph input read by value
        if id(node) in needed:
            continue
        if node.op_type in _SHAPE_LEAVES and node.input[0] in shapes:
            leaves[t] = _shape_value(node, shapes[node.input[0]])
            continue
        if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute):
            return None
        needed.add(id(node))
        stack.extend(node.input)
    nodes = [n for n in graph.node if id(n) in needed]
    used = {i for n in nodes for i in n.input} | {name}
    tensors = [inits[i] for i in used if i in inits] + [numpy_helper.from_array(v, k) for k, v in leaves.items()]
    sub = helper.make_graph(nodes, "condition", [], [helper.make_tensor_value_info(name, 0, None)], tensors)
    model = helper.make_model(sub, opset_imports=[helper.make_opsetid("", 18)])
    try:
        (value,) = ReferenceEvaluator(model).run(None, {})
    except Exception:
        return None
    return bool(np.asarray(value).reshape(-1)[0])


def _shape_value(node, shape: list[int]) -> np.ndarray:
    if node.op_type == "Size":
        return np.asarray(int(np.prod(shape)), dtype=np.int64)
    attrs = {a.name: a.i for a in node.attribute}
    return np.asarray(shape[attrs.get("start", 0) : attrs.get("end", len(shape))], dtype=np.int64)


def _splice(graph, index: int, node, branch) -> None:
    """Put the branch's nodes (and initializers) at the If's place; its outputs become the If's through
    Identity nodes. Branch-local names that clash with the outer graph's are renamed."""
    taken = (
        {o for n in graph.node for o in n.output} | {i.name for i in graph.input} | {t.name for t in graph.initializer}
    )
    local = {o for n in branch.node for o in n.output} | {t.name for t in branch.initializer}
    rename = {n: f"{n}__{node.name or 'if'}" for n in local if n in taken}
    new_nodes = []
    for n in branch.node:
        copy = onnx.NodeProto()
        copy.CopyFrom(n)
        _rename(copy, rename)
        new_nodes.append(copy)
    for t in branch.initializer:
        copy = onnx.TensorProto()
        copy.CopyFrom(t)
        copy.name = rename.get(t.name, t.name)
        graph.initializer.append(copy)
    for src, dst in zip(branch.output, node.output):
        new_nodes.append(helper.make_node("Identity", [rename.get(src.name, src.name)], [dst]))
    del graph.node[index]
    for offset, n in enumerate(new_nodes):
        graph.node.insert(index + offset, n)


def _rename(node, rename: dict) -> None:
    for i, name in enumerate(node.input):
        node.input[i] = rename.get(name, name)
    for i, name in enumerate(node.output):
        node.output[i] = rename.get(name, name)
    for a in node.attribute:
        for g in [a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs):
            for inner in g.node:  # outer names read inside nested branches
                _rename(inner, rename)


def inputs_that_choose_branches(model: onnx.ModelProto) -> dict[str, str]:
    """{graph input: If node} for each top-level If whose condition reads a graph input's value (not only its
    shape): pinning that input with --const lets the If fold."""
    graph = model.graph
    producer = {o: n for n in graph.node for o in n.output}
    inputs = {i.name for i in graph.input} - {t.name for t in graph.initializer}
    found: dict[str, str] = {}
    for node in graph.node:
        if node.op_type != "If":
            continue
        seen, stack = set(), [node.input[0]]
        while stack:
            t = stack.pop()
            if t in seen or not t:
                continue
            seen.add(t)
            if t in inputs:
                found.setdefault(t, node.name or node.output[0])
            source = producer.get(t)
            if source is not None and source.op_type not in _SHAPE_LEAVES:
                stack.extend(source.input)
    return found
