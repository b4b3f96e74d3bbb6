"""Inputs TVM's ONNX importer needs as constants: shapes computed inside the graph (folded with onnxsim once the
input shapes are bound) and graph inputs that feed a shape, axes, pads or sizes position (pinned with --const)."""

from __future__ import annotations

import onnx

from tuner.frontend.checks import node_label

# Ops whose presence means shapes are computed inside the graph.
_SHAPE_OPS = {"Shape", "Size"}
# op -> indices of the inputs TVM's importer needs as constants (shapes, axes, pads, scales, sizes, counts)
_STATIC_INPUT_OPS = {
    "Reshape": (1,),
    "Pad": (1, 2, 3),
    "Expand": (1,),
    "ConstantOfShape": (0,),
    "Tile": (1,),
    "Range": (0, 1, 2),
    "Resize": (2, 3),
    "Upsample": (1,),
    "Slice": (1, 2, 3, 4),
    "TopK": (1,),
    "Unsqueeze": (1,),
    "Squeeze": (1,),
    "Split": (1,),
    "OneHot": (1, 2),
    **{op: (0,) for op in ("HannWindow", "HammingWindow", "BlackmanWindow")},
    "CumSum": (1,),
    "CumProd": (1,),
    "NonMaxSuppression": (2, 3, 4),  # max boxes per class, IoU and score thresholds
    "Dropout": (1, 2),  # ratio, training_mode
    **{op: (1,) for op in ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
                           "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare")},
}  # fmt: skip


def static_inputs(model: onnx.ModelProto) -> dict[str, str]:
    """Graph inputs that feed a position TVM's importer needs as a constant, directly or through Casts: {input
    name: where}. Such an input is pinned with --const NAME=VALUES (the conformance runner binds it from the
    test's data)."""
    inputs = {i.name for i in model.graph.input} - {t.name for t in model.graph.initializer}
    origin = {name: name for name in inputs}  # tensor -> the graph input it is a cast of
    for node in model.graph.node:
        if node.op_type in ("Cast", "Identity") and node.input and node.input[0] in origin:
            origin[node.output[0]] = origin[node.input[0]]
    found: dict[str, str] = {}
    for i, node in enumerate(model.graph.node):
        for idx in _STATIC_INPUT_OPS.get(node.op_type, ()):
            if len(node.input) > idx and node.input[idx] in origin:
                found.setdefault(origin[node.input[idx]], f"input {idx} of {node.op_type} node {node_label(node, i)}")
    return found


def needs_shape_folding(model: onnx.ModelProto) -> list[str]:
    """Reasons the graph needs its shape subgraphs folded before TVM can import it (empty: none)."""
    static = {t.name for t in model.graph.initializer}
    static |= {o for n in model.graph.node if n.op_type == "Constant" for o in n.output}
    reasons = []
    for i, node in enumerate(model.graph.node):
        if node.op_type in _SHAPE_OPS:
            reasons.append(f"{node.op_type} node {node_label(node, i)} computes a shape at run time")
        for idx in _STATIC_INPUT_OPS.get(node.op_type, ())[:1]:  # the first: the shape-like one onnxsim folds
            if len(node.input) > idx and node.input[idx] and node.input[idx] not in static:
                reasons.append(f"{node.op_type} node {node_label(node, i)} takes a computed input {node.input[idx]!r}")
    return reasons
