"""Names for the nodes onnxsim makes, taken from the model's own nodes they replace.

onnxsim names what it creates after its op and a counter (`Gemm_235`, `Reshape_12`, `Constant_0`): a report that
says `Gemm_235` on a model with no Gemm sends the user looking for a node that is not in their file. A node the
simplifier made computes what some of the original nodes computed, between tensors both graphs know: follow its
outputs forward and its inputs backward through the simplifier's new tensors to tensors of the original graph,
then collect the original nodes between those two frontiers. The new node is named after them, with its own op
in brackets: `/encoder/layer.0/query/MatMul+Add [Gemm]`.
"""

from __future__ import annotations

import os

import onnx

MAX_NAMED = 3  # original nodes spelled out in one name; more are counted


def restore_node_names(original: onnx.GraphProto, simplified: onnx.GraphProto) -> int:
    """Rename, in place, the nodes of `simplified` whose names are not in `original`. Returns how many."""
    known_names = {n.name for n in original.node if n.name}
    producer = {t: n for n in original.node for t in n.output if t}
    known = set(producer) | {t.name for t in original.initializer} | {i.name for i in original.input}
    made = [n for n in simplified.node if not n.name or n.name not in known_names]
    if not made:
        return 0
    new_producer = {t: n for n in simplified.node for t in n.output if t}
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for n in simplified.node:
        for t in n.input:
            consumers.setdefault(t, []).append(n)
    taken = {n.name for n in simplified.node if n.name and n.name in known_names}
    data = _data_tensors(original)
    renamed = 0
    for node in made:
        outs = _frontier(node.output, lambda t: [o for c in consumers.get(t, []) for o in c.output], known)
        ins = _frontier(node.input, lambda t: list(new_producer[t].input) if t in new_producer else [], known)
        sources = [s.name for s in _between(outs, ins, producer, data) if s.name]
        if not sources:  # the model's nodes there had no names: the simplifier's name is as good as any
            continue
        name = _unique(f"{_compact(sources)} [{node.op_type}]", taken)
        node.name = name
        taken.add(name)
        renamed += 1
    return renamed


def _frontier(start, step, known: set[str]) -> list[str]:
    """Tensors of the original graph reached from `start` by `step` through tensors only the new graph has."""
    seen, found, todo = set(), [], [t for t in start if t]
    while todo:
        t = todo.pop()
        if t in seen:
            continue
        seen.add(t)
        if t in known:
            found.append(t)
        else:
            todo.extend(x for x in step(t) if x)
    return found


def _data_tensors(graph: onnx.GraphProto) -> set[str]:
    """Tensors computed from the graph's inputs' values (not from weights alone, nor from shapes only)."""
    weights = {t.name for t in graph.initializer}
    data = {i.name for i in graph.input if i.name not in weights}
    for n in graph.node:  # ONNX nodes are in topological order
        if n.op_type not in ("Shape", "Size") and any(t in data for t in n.input):
            data.update(t for t in n.output if t)
    return data


def _between(outputs: list[str], inputs: list[str], producer: dict, data: set[str]) -> list[onnx.NodeProto]:
    """Original nodes that compute `outputs` from `inputs` (walking back from the outputs through data tensors,
    stopping at the inputs), in the original graph's order: the weights' and shapes' own subgraphs are folded and
    not named. A node with no inputs (a Constant that stands for a folded subgraph) is named after the node that
    computed its value."""
    stop = set(inputs)
    found: dict[int, onnx.NodeProto] = {}
    todo = [t for t in outputs if t not in stop]
    seen = set()
    while todo:
        t = todo.pop()
        if t in seen or t in stop or t not in producer:
            continue
        seen.add(t)
        n = producer[t]
        found[id(n)] = n
        if inputs:  # a node with no inputs (a folded constant) is named after the last node only
            todo.extend(x for x in n.input if x in data)
    order = {id(n): k for k, n in enumerate(producer.values())}
    return sorted(found.values(), key=lambda n: order.get(id(n), 0))


def _compact(names: list[str]) -> str:
    """`/a/b/MatMul`, `/a/b/Add` -> `/a/b/MatMul+Add`; long lists are counted."""
    unique = list(dict.fromkeys(names))
    shown, more = unique[:MAX_NAMED], len(unique) - MAX_NAMED
    prefix = os.path.commonprefix(shown)
    prefix = prefix[: prefix.rfind("/") + 1] if "/" in prefix else ""
    text = prefix + "+".join(s[len(prefix) :] for s in shown)
    return text + (f"+{more} more" if more > 0 else "")


def source_names(name: str) -> list[str]:
    """The model's node names a name made by `restore_node_names` may stand for (for matching another runtime's
    per-node profile): `/a/b/MatMul+Add [Gemm]` -> `/a/b/MatMul`, `/a/b/Add` (and `/a/Add`, `/Add`, `Add`: the
    shared prefix ends at one of the first name's slashes). A name without the bracket is itself."""
    if not name.endswith("]") and "] #" not in name:
        return [name]
    body = name[: name.rfind(" [")]
    parts = [p for p in body.split("+") if p and not p.endswith(" more")]
    if not parts:
        return [name]
    first, names = parts[0], [parts[0]]
    prefixes = [first[: k + 1] for k, ch in enumerate(first) if ch == "/"] + [""]
    for rest in parts[1:]:
        names += [prefix + rest for prefix in prefixes]
    return list(dict.fromkeys(names))


def _unique(name: str, taken: set[str]) -> str:
    if name not in taken:
        return name
    k = 2
    while f"{name} #{k}" in taken:
        k += 1
    return f"{name} #{k}"
