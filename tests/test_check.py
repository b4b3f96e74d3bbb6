import json

import numpy as np
import onnx
from conftest import light, run_cli
from onnx import TensorProto, helper, numpy_helper

from tuner.commands.check import check_model


def _save(model, path):
    onnx.save(model, str(path))
    return str(path)


def unsupported_in_if_model(path):
    """An If whose else-branch holds a Bernoulli (no converter in TVM 0.27 or ours), selected by a scalar input."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8])
    flag = helper.make_tensor_value_info("flag", TensorProto.BOOL, [])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8])
    then_g = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["t"], name="then_relu")],
        "then",
        [],
        [helper.make_tensor_value_info("t", TensorProto.FLOAT, [1, 4, 8])],
    )
    else_g = helper.make_graph(
        [helper.make_node("Bernoulli", ["x"], ["e"], name="act/Bernoulli")],
        "else",
        [],
        [helper.make_tensor_value_info("e", TensorProto.FLOAT, [1, 4, 8])],
    )
    node = helper.make_node("If", ["flag"], ["y"], name="branch", then_branch=then_g, else_branch=else_g)
    graph = helper.make_graph([node], "g", [x, flag], [y])
    return _save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def test_check_reports_everything_json(cnn):
    r = run_cli("check", cnn, "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["opset"] == 17
    assert doc["ops"]["Conv"] == 3 and doc["ops"]["BatchNormalization"] == 3
    assert doc["inputs"] == [{"name": "input", "shape": [1, 3, 32, 32], "dtype": "float32"}]
    assert doc["outputs"][0]["name"] == "probs"
    assert doc["unsupported"] == [] and doc["buildable"] is True


def test_dynamic_dims_need_input_shape(mlp):
    rep = check_model(mlp)
    assert not rep.buildable and rep.dynamic_inputs[0]["name"] == "x"
    r = run_cli("check", mlp)
    assert r.returncode == 1 and "needs --input-shape" in r.stdout
    assert check_model(mlp, {"x": (2, 32)}).buildable


def test_unsupported_ops_in_subgraphs_are_listed_with_node_names(tmp_path):
    path = unsupported_in_if_model(tmp_path / "lstm_if.onnx")
    rep = check_model(path)
    assert [u["op"] for u in rep.unsupported] == ["Bernoulli"]
    assert rep.unsupported[0]["nodes"] == ["branch/else_branch/act/Bernoulli"]
    assert rep.ops == {"If": 1, "Bernoulli": 1, "Relu": 1}
    r = run_cli("check", path, "--json")
    assert r.returncode == 1
    assert json.loads(r.stdout)["unsupported"][0]["nodes"] == ["branch/else_branch/act/Bernoulli"]


def test_every_node_a_converter_rejects_is_listed(tmp_path, monkeypatch):
    """Two nodes a converter rejects, with an accepted node between them: both are listed, by name, with the
    converter's reason; the import goes on past the first with zeros standing in. (A converter registered over
    TVM's that rejects Softsign stands for one TVM 0.27 rejects: which attribute combinations those are changes
    between TVM versions.)"""
    from tuner.frontend.converters import CONVERTERS

    def reject(bb, inputs, attrs):
        raise ValueError("Softsign with this attribute combination is not implemented")

    monkeypatch.setitem(CONVERTERS, "Softsign", reject)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    nodes = [
        helper.make_node("Softsign", ["x"], ["s1"], name="first_softsign"),
        helper.make_node("Relu", ["s1"], ["r"], name="relu"),
        helper.make_node("Softsign", ["r"], ["y"], name="second_softsign"),
    ]
    graph = helper.make_graph(nodes, "g", [x], [y])
    path = _save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "ss.onnx")
    rep = check_model(path)
    assert [(u["op"], u["nodes"]) for u in rep.unsupported] == [
        ("Softsign", ["first_softsign"]),
        ("Softsign", ["second_softsign"]),
    ]
    assert all("not implemented" in u["reason"] for u in rep.unsupported)
    assert not rep.buildable


def test_const_freezes_the_branch_away(tmp_path):
    path = unsupported_in_if_model(tmp_path / "lstm_if.onnx")
    rep = check_model(path, consts={"flag": 1})
    assert rep.buildable, rep.to_json()
    assert any("flag frozen" in n for n in rep.preparation)
    assert any("folded" in n for n in rep.preparation)


def test_shape_subgraph_is_folded(tmp_path):
    # Shape -> Gather -> Concat -> Reshape: TVM's importer rejects it unfolded.
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 6])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 2, 3])
    nodes = [
        helper.make_node("Shape", ["x"], ["s"], name="shape"),
        helper.make_node("Gather", ["s", "zero"], ["n0"], name="gather", axis=0),
        helper.make_node("Unsqueeze", ["n0", "zero1"], ["n1"], name="unsq"),
        helper.make_node("Concat", ["n1", "tail"], ["newshape"], name="concat", axis=0),
        helper.make_node("Reshape", ["x", "newshape"], ["r"], name="reshape"),
        helper.make_node("Relu", ["r"], ["y"], name="relu"),
    ]
    inits = [
        numpy_helper.from_array(np.array(0, np.int64), "zero"),
        numpy_helper.from_array(np.array([0], np.int64), "zero1"),
        numpy_helper.from_array(np.array([2, 3], np.int64), "tail"),
    ]
    path = _save(
        helper.make_model(helper.make_graph(nodes, "g", [x], [y], inits), opset_imports=[helper.make_opsetid("", 17)]),
        tmp_path / "reshape.onnx",
    )
    rep = check_model(path, {"x": (2, 6)})
    assert rep.buildable, rep.to_json()
    assert rep.folded.get("Shape") == 1 and "Relu" not in rep.folded


def test_light_model_with_initializers_as_inputs():
    rep = check_model(light("squeezenet"))
    assert rep.buildable
    assert [i.name for i in rep.inputs] == ["data_0"]  # weights listed as graph inputs are not inputs
