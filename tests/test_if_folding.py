"""If nodes with compile-time conditions are replaced by the branch they take (tuner/if_folding.py)."""

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tuner.frontend.if_folding import fold_constant_ifs


def _branch(name, op):
    node = helper.make_node(op, ["x", "x"], [f"{name}_y"])
    return helper.make_graph([node], name, [], [helper.make_tensor_value_info(f"{name}_y", TensorProto.FLOAT, None)])


def _model(cond_nodes, inits, x_shape=(2, 3)):
    if_node = helper.make_node(
        "If", ["cond"], ["y"], then_branch=_branch("then", "Add"), else_branch=_branch("else", "Mul")
    )
    graph = helper.make_graph(
        cond_nodes + [if_node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(x_shape))],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_condition_on_a_pinned_value_takes_its_branch():
    sr = numpy_helper.from_array(np.array(8000, dtype=np.int64), "sr")
    k = numpy_helper.from_array(np.array(16000, dtype=np.int64), "k")
    model = _model([helper.make_node("Equal", ["sr", "k"], ["cond"])], [sr, k])
    assert fold_constant_ifs(model) == ["y -> else"]
    ops = [n.op_type for n in model.graph.node]
    assert "If" not in ops and "Mul" in ops and "Add" not in ops
    onnx.checker.check_model(model)
    from onnx.reference import ReferenceEvaluator

    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(ReferenceEvaluator(model).run(None, {"x": x})[0], x * x)


def test_a_condition_on_a_static_rank_is_folded_one_on_values_is_not():
    rank_nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Size", ["s"], ["r"]),
        helper.make_node("Equal", ["r", "two"], ["cond"]),
    ]
    two = numpy_helper.from_array(np.array(2, dtype=np.int64), "two")
    model = _model(rank_nodes, [two])
    assert fold_constant_ifs(model) == ["y -> then"]

    zero = numpy_helper.from_array(np.array(0, dtype=np.float32), "zero")
    value_nodes = [helper.make_node("ReduceSum", ["x"], ["t"]), helper.make_node("Greater", ["t", "zero"], ["cond"])]
    model = _model(value_nodes, [zero])
    assert fold_constant_ifs(model) == []
    assert any(n.op_type == "If" for n in model.graph.node)


def test_check_names_the_input_a_branch_depends_on():
    from tuner.frontend.if_folding import inputs_that_choose_branches

    k = numpy_helper.from_array(np.array(16000, dtype=np.int64), "k")
    model = _model([helper.make_node("Equal", ["sr", "k"], ["cond"])], [k])
    model.graph.input.append(helper.make_tensor_value_info("sr", TensorProto.INT64, []))
    assert inputs_that_choose_branches(model) == {"sr": "y"}
    rank = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Size", ["s"], ["r"])]
    rank.append(helper.make_node("Equal", ["r", "k"], ["cond"]))
    assert inputs_that_choose_branches(_model(rank, [k])) == {}  # reads x's shape only
