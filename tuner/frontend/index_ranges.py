"""The valid range of each integer input that indexes a tensor: a token id into an embedding table, a token type
into its two rows. The package boundary refuses a value outside it with an error that names the input, the value
and the range (as ONNX Runtime does); generated inputs stay inside it.

An input's index range is the intersection over every index operand it reaches through ops that keep its values
(Cast, Reshape, Unsqueeze, ...): [-rows, rows - 1] of the gathered axis, ONNX's rule for negative indices."""

from __future__ import annotations

from dataclasses import dataclass

# ops whose output holds the input's values (some of them, rearranged): an index stays an index through them
_VALUE_KEEPING = {"Cast", "Reshape", "Unsqueeze", "Squeeze", "Flatten", "Identity", "Expand", "Transpose", "Tile"}
# op -> (operand that indexes, operand indexed); the axis attribute says which of its axes
_INDEXING = {"Gather": (1, 0), "GatherElements": (1, 0), "ScatterElements": (1, 0), "Scatter": (1, 0)}


@dataclass(frozen=True)
class IndexRange:
    lo: int
    hi: int
    why: str  # "Gather node 'emb' axis 0 (2 rows)"

    def to_json(self) -> dict:
        return {"range": [self.lo, self.hi], "range_of": self.why}


def index_ranges(model) -> dict[str, IndexRange]:
    """{integer graph input: its valid range}, for inputs that reach an index operand; shapes must be bound and
    inferred (prepare_model does both)."""
    import onnx

    graph = model.graph
    shapes = _static_shapes(graph)
    consumers: dict[str, list] = {}
    for node in graph.node:
        for k, name in enumerate(node.input):
            consumers.setdefault(name, []).append((node, k))
    inits = {t.name for t in graph.initializer}
    out = {}
    for vi in graph.input:
        elem = vi.type.tensor_type.elem_type
        if vi.name in inits or elem not in (onnx.TensorProto.INT32, onnx.TensorProto.INT64):
            continue
        found = _ranges_reached(vi.name, consumers, shapes)
        if found:
            lo = max(r.lo for r in found)
            tightest = min(found, key=lambda r: r.hi)
            out[vi.name] = IndexRange(lo, tightest.hi, tightest.why)
    return out


def _ranges_reached(name: str, consumers: dict, shapes: dict) -> list[IndexRange]:
    found, seen, todo = [], {name}, [name]
    while todo:
        tensor = todo.pop()
        for node, k in consumers.get(tensor, []):
            if node.op_type in _VALUE_KEEPING and k == 0:
                for o in node.output:
                    if o not in seen:
                        seen.add(o)
                        todo.append(o)
            elif node.op_type in _INDEXING and k == _INDEXING[node.op_type][0]:
                table = shapes.get(node.input[_INDEXING[node.op_type][1]])
                axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
                if table is None or not -len(table) <= axis < len(table) or not isinstance(table[axis], int):
                    continue
                rows = table[axis]
                label = node.name or node.output[0]
                found.append(IndexRange(-rows, rows - 1, f"{node.op_type} node {label!r} axis {axis} ({rows} rows)"))
    return found


def _static_shapes(graph) -> dict[str, list]:
    """Tensor name -> shape, from initializers and inferred value infos (a dim without a value is None)."""
    shapes = {t.name: list(t.dims) for t in graph.initializer}
    for vi in list(graph.value_info) + list(graph.input) + list(graph.output):
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape"):
            dims = [d.dim_value if d.HasField("dim_value") else None for d in vi.type.tensor_type.shape.dim]
            shapes.setdefault(vi.name, dims)
    for node in graph.node:  # Constant nodes hold tables too
        if node.op_type == "Constant":
            for a in node.attribute:
                if a.name == "value":
                    shapes.setdefault(node.output[0], list(a.t.dims))
    return shapes
