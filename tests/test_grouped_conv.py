"""Grouped convolutions with the group as a loop of its own (tuner/grouped_conv.py): ShuffleNet- and ResNeXt-style
grouped convs built through the real pipeline (NHWC, default schedules, packed weights) against ONNX Runtime."""

import numpy as np
import pytest
from conftest import assert_matches_onnxruntime, save_onnx
from tvm import relax

RNG = np.random.default_rng(0)


def _grouped_model(path: str) -> str:
    """Grouped 1x1 (4 groups, 6 -> 28 channels each), grouped 3x3 stride 2 (2 groups, 56 -> 8), grouped 3x3
    dilated (8 groups of 2), a depthwise 3x3 (TOPI's compute) and a bias + ReLU after each."""
    from onnx import helper, numpy_helper

    inits, nodes, x = [], [], "input"
    convs = [  # (out channels, in channels per group, kernel, groups, stride, dilation)
        (112, 6, 1, 4, 1, 1),
        (16, 56, 3, 2, 2, 1),
        (16, 2, 3, 8, 1, 2),
        (16, 1, 3, 16, 1, 1),
    ]
    for i, (o, cg, k, g, s, d) in enumerate(convs):
        inits += [
            numpy_helper.from_array((RNG.standard_normal((o, cg, k, k)) * 0.3).astype("float32"), f"w{i}"),
            numpy_helper.from_array(RNG.standard_normal(o).astype("float32"), f"b{i}"),
        ]
        pad = d * (k // 2)
        attrs = {"group": g, "strides": [s, s], "dilations": [d, d], "pads": [pad] * 4}
        nodes += [
            helper.make_node("Conv", [x, f"w{i}", f"b{i}"], [f"c{i}"], **attrs),
            helper.make_node("Relu", [f"c{i}"], [f"r{i}"]),
        ]
        x = f"r{i}"
    return save_onnx(path, nodes, {"input": (1, 24, 14, 14)}, {x: (1, 16, 7, 7)}, inits)


@pytest.fixture(scope="module")
def grouped_model(tmp_path_factory):
    return _grouped_model(str(tmp_path_factory.mktemp("grouped") / "grouped.onnx"))


def test_grouped_convs_loop_over_groups_and_match_onnxruntime(grouped_model):
    from tuner.build import build_prepared
    from tuner.fusion import get_strategy
    from tuner.ir import kernel_scripts
    from tuner.onnx_model import prepare_model
    from tuner.target import resolve_target

    built = build_prepared(prepare_model(grouped_model), resolve_target("llvm"), get_strategy("tvm"), layout="nhwc")
    scripts = "\n".join(kernel_scripts(built.fused_mod).values())
    # the grouped convs' results as (n, y, x, group, channel): the three grouped convs, not the depthwise one
    for shape in ("T.int64(14), T.int64(14), T.int64(4), T.int64(28)", "T.int64(7), T.int64(7), T.int64(2), T.int64(8)",
                  "T.int64(7), T.int64(7), T.int64(8), T.int64(2)"):  # fmt: skip
        assert shape in scripts, shape
    assert_matches_onnxruntime(
        built.executable, grouped_model, {"input": RNG.standard_normal((1, 24, 14, 14)).astype("float32")}
    )


def test_only_channels_last_grouped_convs_with_several_channels_per_group():
    from tuner.grouped_conv import is_grouped_nhwc

    x = relax.Var("x", relax.TensorType((1, 8, 8, 16), "float32"))

    def attrs(groups, cg, data_layout="NHWC", kernel_layout="OHWI"):
        shape = (16, 3, 3, cg) if kernel_layout == "OHWI" else (16, cg, 3, 3)
        w = relax.Var("w", relax.TensorType(shape, "float32"))
        data = x if data_layout == "NHWC" else relax.Var("y", relax.TensorType((1, 16, 8, 8), "float32"))
        call = relax.op.nn.conv2d(data, w, groups=groups, data_layout=data_layout, kernel_layout=kernel_layout)
        return call.attrs, shape

    assert is_grouped_nhwc(*attrs(4, 4))
    assert not is_grouped_nhwc(*attrs(1, 16))  # dense
    assert not is_grouped_nhwc(*attrs(16, 1))  # depthwise: TOPI's compute vectorises it already
    assert not is_grouped_nhwc(*attrs(4, 4, "NCHW", "OIHW"))
