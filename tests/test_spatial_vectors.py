"""Vector length of spatial-only CPU kernels (default_schedule.spatial_vector_extent): structure only."""

import pytest
import tvm
from tvm.script import tirx as T

from tuner.core.target import resolve_target
from tuner.schedule.default_schedule import MAX_VECTOR_EXTENT, spatial_vector_extent
from tuner.schedule.recipes import SPATIAL_64


def _to_channels_last(c: int, hw: int = 80):
    @T.prim_func(private=True, s_tir=True)
    def transpose(
        a: T.Buffer((T.int64(1), T.int64(c), T.int64(hw), T.int64(hw)), "float32"),
        b: T.Buffer((T.int64(1), T.int64(hw), T.int64(hw), T.int64(c)), "float32"),
    ):
        T.func_attr({"tirx.noalias": True})
        for n, h, w, k in T.grid(T.int64(1), T.int64(hw), T.int64(hw), T.int64(c)):
            with T.sblock("T_transpose"):
                vn, vh, vw, vk = T.axis.remap("SSSS", [n, h, w, k])
                b[vn, vh, vw, vk] = a[vn, vk, vh, vw]

    return transpose


@T.prim_func(private=True, s_tir=True)
def _row_sum(a: T.Buffer((T.int64(8), T.int64(24)), "float32"), b: T.Buffer((T.int64(8),), "float32")):
    T.func_attr({"tirx.noalias": True})
    for i, j in T.grid(T.int64(8), T.int64(24)):
        with T.sblock("sum"):
            vi, vj = T.axis.remap("SR", [i, j])
            with T.init():
                b[vi] = T.float32(0)
            b[vi] = b[vi] + a[vi, vj]


def test_vectors_follow_the_innermost_output_axis():
    assert spatial_vector_extent(_to_channels_last(24), lanes=16) == 24  # not 64 across channel boundaries
    assert spatial_vector_extent(_to_channels_last(160), lanes=16) == 32  # a divisor, whole vectors
    assert spatial_vector_extent(_to_channels_last(3), lanes=16) == MAX_VECTOR_EXTENT  # too short to be a vector
    assert spatial_vector_extent(_row_sum, lanes=16) == MAX_VECTOR_EXTENT  # a reduction: the tiling decides


def test_default_schedule_vectorises_within_rows(tmp_path):
    """DepthToSpace + bias + ReLU (a decoder's upsampling tail): one kernel of reshapes and transposes whose output
    rows are 80 long. Vectors of 64 across row boundaries make every lane's index its own div/mod."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from tuner.build.executable import lower_prepared
    from tuner.core.ir import primfuncs
    from tuner.frontend.onnx_model import prepare_model
    from tuner.fusion import get_strategy
    from tuner.schedule.default_schedule import schedule_untuned

    graph = helper.make_graph(
        [
            helper.make_node("DepthToSpace", ["x"], ["d"], blocksize=2, mode="DCR"),
            helper.make_node("Add", ["d", "b"], ["s"]),
            helper.make_node("Relu", ["s"], ["y"]),
        ],
        "upsampling_tail",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 96, 40, 40])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 24, 80, 80])],
        [numpy_helper.from_array(np.ones((1, 24, 1, 1), "float32"), "b")],
    )
    path = str(tmp_path / "tail.onnx")
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    spec = resolve_target("llvm:znver4")
    lowered = lower_prepared(prepare_model(path), spec, get_strategy("tvm"))
    (fitted,) = primfuncs(schedule_untuned(lowered.mod, spec)[0]).values()
    (before,) = primfuncs(schedule_untuned(lowered.mod, spec, recipe=SPATIAL_64)[0]).values()
    assert "T.vectorized(T.int64(16))" in fitted.script()  # 80 = 5 vectors of 16 (AVX-512)
    assert "T.vectorized(T.int64(64))" in before.script()


def test_tuning_space_of_a_spatial_kernel_vectorises_one_channel_run():
    from tvm.s_tir import meta_schedule as ms

    from tuner.schedule.default_schedule import template_space

    func = _to_channels_last(24).with_attr("global_symbol", "main")
    ctx = ms.TuneContext(
        mod=tvm.IRModule({"main": func}),
        target=resolve_target("llvm").tvm_target(),
        space_generator=template_space(func, lanes=16),
        task_name="t",
        num_threads=1,
    )
    spaces = ctx.generate_design_space()
    assert spaces and all('"meta_schedule.vectorize": 24' in s.mod.script() for s in spaces)


@pytest.mark.parametrize("mcpu, lanes", [("znver4", 16), ("rocketlake", 16), ("sapphirerapids", 16), ("znver3", 8)])
def test_vector_width_comes_from_what_llvm_knows_of_the_cpu(mcpu, lanes):
    """AVX-512 on any CPU LLVM models with it (a name table once missed Intel's rocketlake: 8 lanes there)."""
    from tuner.core.target import vector_lanes

    assert vector_lanes(resolve_target(f"llvm:{mcpu}")) == lanes
