import pytest

from tuner.cli.shapes import parse_consts, parse_input_shapes
from tuner.errors import TunerError


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
