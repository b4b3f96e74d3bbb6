"""Grouped convolutions computed per group, the group an axis (tuner/grouped_conv.py): ShuffleNet- and ResNeXt-style
grouped convs built through the real pipeline (NHWC, default schedules, packed weights) against ONNX Runtime."""

import re

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
    from tuner.build.executable import build_prepared
    from tuner.core.ir import kernel_scripts
    from tuner.core.target import resolve_target
    from tuner.frontend.onnx_model import prepare_model
    from tuner.fusion import get_strategy

    built = build_prepared(prepare_model(grouped_model), resolve_target("llvm"), get_strategy("tvm"), layout="nhwc")
    scripts = kernel_scripts(built.fused_mod)
    grouped = {name: s for name, s in scripts.items() if "group_conv2d_nhwc" in name}
    # two grouped convs (not the depthwise one) compute (n, y, x, group, channel), the first one's 28 channels
    # per group padded to 32, and the bias and ReLU on that shape on the conv's tiles, with the slice back to 28
    # (one parallel loop holds the 1x1 conv's every block)
    for shape in (
        "T.int64(14), T.int64(14), T.int64(4), T.int64(32)",
        "T.int64(7), T.int64(7), T.int64(2), T.int64(8)",
    ):
        allocated = f"nhwc_intermediate = T.sblock_alloc_buffer((T.int64(1), {shape}))"
        assert sum(allocated in s for s in grouped.values()) == 1, shape
    # the third (8 groups of 2 channels) is one banded conv over all 16 (test_groups_of_four_run_as_one_banded...)
    assert len(grouped) == 2 and all("_add" in name and "_relu" in name for name in grouped)
    assert sum("banded_conv2d_nhwc" in name for name in scripts) == 1
    one_by_one = next(s for s in grouped.values() if "T.int64(4), T.int64(32)))" in s)
    assert one_by_one.count("T.parallel(") == 1 and 'T.sblock("T_strided_slice_with_axes")' in one_by_one
    # the reshapes back to (n, y, x, channels) run as views: no kernel copies them
    assert not any("reshape" in site.kernel for site in built.kernels), [site.kernel for site in built.kernels]
    assert_matches_onnxruntime(
        built.executable, grouped_model, {"input": RNG.standard_normal((1, 24, 14, 14)).astype("float32")}
    )


def test_only_channels_last_grouped_convs_with_several_channels_per_group():
    from tuner.legalize.grouped_conv import is_grouped_nhwc

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


def _residual_model(path: str) -> str:
    """A ShuffleNet unit's tail: grouped 1x1 (4 groups of 12 channels) + bias, residual add, ReLU, then a second
    grouped 1x1 + bias: 12 channels per group are padded to a whole vector (16 on AVX-512 and AVX2 alike)."""
    from onnx import helper, numpy_helper

    inits = []
    for i in range(2):
        inits += [
            numpy_helper.from_array((RNG.standard_normal((48, 12, 1, 1)) * 0.3).astype("float32"), f"w{i}"),
            numpy_helper.from_array(RNG.standard_normal(48).astype("float32"), f"b{i}"),
        ]
    nodes = [
        helper.make_node("Conv", ["input", "w0", "b0"], ["c0"], group=4),
        helper.make_node("Add", ["c0", "input"], ["s"]),
        helper.make_node("Relu", ["s"], ["r"]),
        helper.make_node("Conv", ["r", "w1", "b1"], ["y"], group=4),
    ]
    return save_onnx(path, nodes, {"input": (1, 48, 8, 8)}, {"y": (1, 48, 8, 8)}, inits)


def test_groups_padded_to_whole_vectors_with_the_residual_add_on_the_tiles(tmp_path):
    from tuner.build.executable import build_prepared
    from tuner.core.ir import kernel_scripts
    from tuner.core.target import resolve_target
    from tuner.frontend.onnx_model import prepare_model
    from tuner.fusion import get_strategy

    model = _residual_model(str(tmp_path / "residual.onnx"))
    built = build_prepared(prepare_model(model), resolve_target("llvm"), get_strategy("tvm"), layout="nhwc")
    grouped = {name: s for name, s in kernel_scripts(built.fused_mod).items() if "group_conv2d_nhwc" in name}
    assert len(grouped) == 2
    # each computes 4 groups of 16 channels, 4 of them zero filters, and keeps the first 12 of each group
    for s in grouped.values():
        assert (
            "nhwc_intermediate = T.sblock_alloc_buffer((T.int64(1), T.int64(8), T.int64(8), T.int64(4), T.int64(16)))"
            in s
        )
    # the residual add and the ReLU fused onto the first conv, on its padded channels (the input reshaped and
    # padded to match)
    assert any(re.search(r"group_conv2d_nhwc\d*_add\d*_add\d*_relu", name) for name in grouped), list(grouped)
    assert_matches_onnxruntime(built.executable, model, {"input": RNG.standard_normal((1, 48, 8, 8)).astype("float32")})


def test_padded_group_rounds_up_to_whole_vectors_within_half_again():
    from tuner.legalize.grouped_conv import padded_group

    assert [padded_group(c, 16) for c in (28, 34, 68, 136, 32, 4, 8, 12)] == [32, 48, 80, 144, 32, 4, 8, 16]
    assert [padded_group(c, 8) for c in (28, 34, 4, 6)] == [32, 40, 4, 8]
    assert padded_group(34, None) == 34  # the channels-unpadded ablation


def _resnext_model(path: str) -> str:
    """ResNeXt-style grouped 3x3 convs, 4 channels per group: 32 groups stride 1, then 8 groups stride 2 dilated
    2, each with bias and ReLU."""
    from onnx import helper, numpy_helper

    inits, nodes, x = [], [], "input"
    for i, (groups, stride, dilation) in enumerate([(32, 1, 1), (32, 2, 2)]):
        inits += [
            numpy_helper.from_array((RNG.standard_normal((128, 4, 3, 3)) * 0.3).astype("float32"), f"w{i}"),
            numpy_helper.from_array(RNG.standard_normal(128).astype("float32"), f"b{i}"),
        ]
        attrs = {"group": groups, "strides": [stride] * 2, "dilations": [dilation] * 2, "pads": [dilation] * 4}
        nodes += [
            helper.make_node("Conv", [x, f"w{i}", f"b{i}"], [f"c{i}"], **attrs),
            helper.make_node("Relu", [f"c{i}"], [f"r{i}"]),
        ]
        x = f"r{i}"
    return save_onnx(path, nodes, {"input": (1, 128, 14, 14)}, {x: (1, 128, 7, 7)}, inits)


def test_groups_of_four_run_as_one_banded_conv_over_all_channels(tmp_path):
    from tuner.build.executable import build_prepared
    from tuner.core.ir import kernel_scripts
    from tuner.core.target import resolve_target, vector_lanes
    from tuner.frontend.onnx_model import prepare_model
    from tuner.fusion import get_strategy
    from tuner.legalize.banded_conv import is_banded

    model = _resnext_model(str(tmp_path / "resnext.onnx"))
    target = resolve_target("llvm")
    built = build_prepared(prepare_model(model), target, get_strategy("tvm"), layout="nhwc")
    scripts = kernel_scripts(built.fused_mod)
    banded = {name: s for name, s in scripts.items() if "banded_conv2d_nhwc" in name}
    if is_banded(4, 4, vector_lanes(target)):  # AVX-512: 4 channels are a quarter of a vector
        # both convs over all 128 channels, read from the input padded by 3 channels on each side (7 shifts),
        # bias and ReLU fused; the band is folded into a constant at build time (no kernel computes it per run)
        assert len(banded) == 2 and all("relu" in name for name in banded), list(scripts)
        assert all("T.int64(134))" in s for s in banded.values())
        assert not any("conv_band" in site.kernel or "group_conv2d" in site.kernel for site in built.kernels)
    else:  # AVX2: 4 channels are half a vector, computed per group
        assert not banded and any("group_conv2d_nhwc" in name for name in scripts)
    assert_matches_onnxruntime(
        built.executable, model, {"input": RNG.standard_normal((1, 128, 14, 14)).astype("float32")}
    )


def test_banded_only_for_small_groups_of_as_many_inputs_as_outputs():
    from tuner.legalize.banded_conv import is_banded

    assert is_banded(4, 4, 16) and is_banded(2, 2, 16) and is_banded(2, 2, 8)
    assert not is_banded(8, 8, 16)  # half a vector per group: computed per group
    assert not is_banded(4, 6, 16)  # inputs and outputs per group differ: no shift maps one to the other
    assert not is_banded(1, 1, 16) and not is_banded(4, 4, None)
