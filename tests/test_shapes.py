import pytest

from tuner.cli.shapes import parse_consts, parse_input_shapes
from tuner.core.errors import TunerError


def test_input_shape_forms():
    assert parse_input_shapes(["x:1x3x8x8"]) == {"x": (1, 3, 8, 8)}
    assert parse_input_shapes(["a:1x4 b:2", "c:[1,2]"]) == {"a": (1, 4), "b": (2,), "c": (1, 2)}
    assert parse_input_shapes(["s:scalar"]) == {"s": ()}
    # names may contain ':' and '/' as ONNX names do
    assert parse_input_shapes(["gpu_0/data_0:1x3x224x224"]) == {"gpu_0/data_0": (1, 3, 224, 224)}


@pytest.mark.parametrize("bad", ["x", "x:", "x:1xa", "x:0x3", "x:1x2 x:3"])
def test_input_shape_errors(bad):
    with pytest.raises(TunerError):
        parse_input_shapes([bad])


def test_consts():
    assert parse_consts(["sr=16000 t=0.5"]) == {"sr": 16000, "t": 0.5}
    with pytest.raises(TunerError):
        parse_consts(["sr"])
    with pytest.raises(TunerError):
        parse_consts(["sr=abc"])
    # a 1-D shape, axes or pads input: comma-separated values (brackets optional)
    assert parse_consts(["axes=1,2 shape=[2,-1] one=[3]"]) == {"axes": [1, 2], "shape": [2, -1], "one": [3]}
    with pytest.raises(TunerError):
        parse_consts(["axes=1,x"])


def _reshape_by_input():
    """Reshape whose target shape is a graph input, as some exporters leave it."""
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Reshape", ["x", "shape"], ["y"], name="reshape"), helper.make_node("Relu", ["y"], ["z"])],
        "reshape_by_input",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4]),
            helper.make_tensor_value_info("shape", TensorProto.INT64, [2]),
        ],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [4, 6])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_shape_input_is_found_and_pinned_with_const(tmp_path):
    import json

    import onnx
    from conftest import run_cli

    from tuner.frontend.shape_inputs import static_inputs

    model = _reshape_by_input()
    assert static_inputs(model) == {"shape": "input 1 of Reshape node reshape"}
    path = str(tmp_path / "r.onnx")
    onnx.save(model, path)
    r = run_cli("check", path, "--json")
    report = json.loads(r.stdout)
    assert not report["buildable"] and any("--const shape=" in p for p in report["problems"]), report
    pkg = str(tmp_path / "r.ftpkg")
    assert run_cli("compile", path, "--const", "shape=4,6", "-o", pkg).returncode == 0
    r = run_cli("run", pkg, "--verify", path, "--json")
    out = json.loads(r.stdout)
    assert r.returncode == 0 and out["verify"]["ok"], r.stdout + r.stderr  # ONNX Runtime fed the pinned shape too
    assert [i["name"] for i in json.loads(run_cli("info", pkg, "--json").stdout)["inputs"]] == ["x"]
    bad = run_cli("compile", path, "--const", "shape=1,2,3", "-o", str(tmp_path / "bad.ftpkg"))
    assert bad.returncode == 2 and "3 values do not fit input shape" in bad.stderr, bad.stderr
