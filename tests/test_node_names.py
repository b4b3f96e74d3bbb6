"""Nodes the simplifier makes are named after the model's own nodes they replace (not `Gemm_3`)."""

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tuner.frontend.onnx_model import prepare_model


def _encoder_block():
    """x[1,8,16] -> MatMul -> Add(bias) -> Relu, with the Reshape target computed from x's shape (a subgraph that
    makes folding necessary): onnxsim turns MatMul+Add into Reshape+Gemm+Reshape."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((16, 16)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(16).astype(np.float32), "b")
    flat = numpy_helper.from_array(np.array([-1, 16], np.int64), "flat")
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["mm"], name="/layer/dense/MatMul"),
        helper.make_node("Add", ["mm", "b"], ["lin"], name="/layer/dense/Add"),
        helper.make_node("Relu", ["lin"], ["act"], name="/layer/act/Relu"),
        helper.make_node("Shape", ["x"], ["xs"], name="/layer/Shape"),
        helper.make_node("Reshape", ["act", "flat"], ["act2"], name="/layer/Flatten"),
        helper.make_node("Reshape", ["act2", "xs"], ["y"], name="/layer/Restore"),
    ]
    graph = helper.make_graph(
        nodes, "block", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8, 16])], [w, b, flat],
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_simplified_nodes_carry_the_names_of_the_nodes_they_replace():
    model = _encoder_block()
    prepared = prepare_model(model, shapes={"x": (2, 8, 16)}, simplify="always")
    original = {n.name for n in model.graph.node}
    names = {n.name: n.op_type for n in prepared.model.graph.node}
    made = {k: v for k, v in names.items() if k not in original}
    assert made, "onnxsim changed nothing: the test no longer covers renaming"
    # every node the simplifier made names the original nodes, and no bare `Op_N` name is left
    for name, op in made.items():
        assert name.startswith("/layer/") and name.endswith(f"[{op}]") or f"[{op}] #" in name, name
    gemms = [k for k, v in made.items() if v == "Gemm"]
    assert gemms == ["/layer/dense/MatMul+Add [Gemm]"], gemms  # MatMul + Add became one Gemm: both are named
    # the shape subgraph (Shape) is folded away and is not named as a source of anything
    assert not any("Shape" in k for k in made), made


def test_renaming_leaves_names_the_model_had():
    from tuner.frontend.node_names import restore_node_names

    model = _encoder_block()
    same = onnx.ModelProto()
    same.CopyFrom(model)
    assert restore_node_names(model.graph, same.graph) == 0
    assert [n.name for n in same.graph.node] == [n.name for n in model.graph.node]


def test_source_names_recover_the_model_nodes_for_another_runtime_profile():
    from tuner.frontend.node_names import source_names

    got = source_names("/m/layer.0/attention/self/query/MatMul+query/Add+Reshape_2 [Gemm]")
    assert got[0] == "/m/layer.0/attention/self/query/MatMul"
    assert {"/m/layer.0/attention/self/query/Add", "/m/layer.0/attention/self/Reshape_2"} <= set(got)
    assert source_names("p2o.MatMul.24+p2o.Add.276 [Gemm] #2")[:2] == ["p2o.MatMul.24", "p2o.Add.276"]
    assert source_names("/layer/act/Relu") == ["/layer/act/Relu"]  # a name the model had


def test_nodes_without_names_in_the_model_keep_the_simplifier_names():
    from tuner.frontend.node_names import restore_node_names

    model = _encoder_block()
    for n in model.graph.node:
        n.name = ""
    simplified = onnx.ModelProto()
    simplified.CopyFrom(model)
    for k, n in enumerate(simplified.graph.node):
        n.name = f"{n.op_type}_{k}"
    assert restore_node_names(model.graph, simplified.graph) == 0
    assert simplified.graph.node[0].name == "MatMul_0"
