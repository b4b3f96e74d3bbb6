"""Register blocks of an odd number of vectors (AVX2's 24, 72, 120 channels) and the post-processor that keeps
their epilogue in whole vectors; checked on the schedules they make (no timing: scripts/bench.py's job)."""

import numpy as np
import pytest
from conftest import conv_relu_task

from tuner.schedule.recipes import ONE_VECTOR_ODD, WIDE_VECTORS
from tuner.schedule.tiles import heuristic_tiles
from tuner.schedule.vector_split import wide_vector_parts

LANES = 8  # AVX2's float32 lanes: the schedules below are made for them on any x86 host (they run on AVX-512 too)


def test_odd_vector_counts_get_three_or_five_vectors_with_16_registers():
    conv_1x1 = [[1, 1, 1, 1], [56, 1, 1, 1], [56, 1, 1, 1], [24, 1, 1, 1], [1, 1], [1, 1], [64, 1]]  # NHWC
    assert heuristic_tiles(conv_1x1, lanes=8, registers=16)[2:4] == [[14, 1, 4, 1], [1, 1, 3, 8]]
    assert heuristic_tiles(conv_1x1, lanes=8, registers=16, recipe=ONE_VECTOR_ODD)[2:4] == [
        [7, 1, 8, 1],
        [3, 1, 1, 8],
    ]
    seventy_two = [[1, 1, 1, 1], [28, 1, 1, 1], [28, 1, 1, 1], [72, 1, 1, 1], [1, 1], [1, 1], [24, 1]]
    assert heuristic_tiles(seventy_two, lanes=8, registers=16)[3] == [3, 1, 3, 8]
    five = [[1, 1, 1, 1], [28, 1, 1, 1], [28, 1, 1, 1], [40, 1, 1, 1], [1, 1], [1, 1], [24, 1]]  # 5 vectors
    assert heuristic_tiles(five, lanes=8, registers=16)[2:4] == [[14, 1, 2, 1], [1, 1, 5, 8]]
    prime = [*five[:3], [184, 1, 1, 1], *five[4:]]  # 23 vectors: one beside 8 rows, as before
    assert heuristic_tiles(prime, lanes=8, registers=16)[2:4] == [[4, 1, 7, 1], [23, 1, 1, 8]]
    # AVX-512 keeps its rule (2 vectors at most, then more side by side only in powers of two)
    assert heuristic_tiles([*conv_1x1[:3], [48, 1, 1, 1], *conv_1x1[4:]], lanes=16)[3][2] == 1


def test_wide_vector_parts():
    assert [wide_vector_parts(n, 8) for n in (8, 16, 24, 32, 40, 48, 12, 4)] == [0, 0, 3, 0, 5, 6, 0, 0]
    assert wide_vector_parts(48, 16) == 3 and wide_vector_parts(24, 16) == 0


def test_only_kernels_with_an_odd_vector_count_get_the_split_in_their_design_space():
    """The post-processor is Python, run for every candidate the search makes: it is in the design space only of
    kernels whose output can have such a vector loop (24 channels on AVX2), not of one with 32 or of one whose
    24 channels are under a vector of 16 lanes."""
    from tuner.schedule.default_schedule import template_space
    from tuner.schedule.vector_split import may_need_split

    task, _ = _conv_24_task()
    func = task.dispatched[0]["main"]
    assert may_need_split(func, 8) and may_need_split(func, 4) and not may_need_split(func, 16)  # 3, 6, 1.5
    with_split, without = (template_space(func, lanes).postprocs for lanes in (8, 16))
    assert [type(p).__name__ for p in with_split][2] == "_PyPostproc"  # what derived_object makes of it
    assert len(with_split) == len(without) + 1 and "_PyPostproc" not in [type(p).__name__ for p in without]


def _conv_24_task():
    """A 1x1 NHWC conv 64 -> 24 channels with a bias and ReLU, as one fused kernel: (task, the host's TVM target)."""
    task, spec = conv_relu_task((1, 28, 28, 64), (24, 1, 1, 64))
    return task, spec.tvm_target()


def _vector_extents(script: str) -> list[int]:
    import re

    return [int(n) for n in re.findall(r"T\.vectorized\(T\.int64\((\d+)\)\)", script)]


@pytest.mark.parametrize("recipe", [None, WIDE_VECTORS])
def test_three_vector_block_epilogue_in_whole_vectors_and_right(recipe):
    """The default schedule of a 24-channel conv runs 4 rows x 3 vectors; its epilogue (bias, ReLU, store) is an
    unrolled loop of three 8-lane vectors, not one 24-lane vector (which LLVM builds lane by lane); WIDE_VECTORS
    (before) leaves the 24. The kernel computes the conv either way (against numpy)."""
    import tvm

    from tuner.schedule.default_schedule import heuristic_schedule

    task, target = _conv_24_task()
    func = task.dispatched[0]["main"]
    kwargs = {} if recipe is None else {"recipe": recipe}
    sch = heuristic_schedule(func, target, LANES, **kwargs)
    script = sch.mod.script()
    extents = _vector_extents(script)
    if recipe is None:
        assert set(extents) == {8} and "T.unroll(T.int64(3))" in script
    else:
        assert 24 in extents
    lib = tvm.compile(sch.mod, target=target)
    rng = np.random.default_rng(0)
    x, w, b = (rng.standard_normal(s).astype("float32") for s in ((1, 28, 28, 64), (24, 1, 1, 64), (1, 1, 1, 24)))
    args = [tvm.runtime.tensor(a) for a in (x, w, b)] + [tvm.runtime.empty((1, 28, 28, 24), "float32")]
    lib["main"](*args)
    want = np.maximum(np.einsum("nhwc,oc->nhwo", x, w[:, 0, 0, :]) + b, 0)
    np.testing.assert_allclose(args[-1].numpy(), want, rtol=1e-4, atol=1e-4)


def test_split_vectors_replay_from_a_record():
    """The split is a post-processor of the default schedule's design space. A tuning record's trace, read back
    from JSON (compile time), and the trace replayed without its post-processing and post-processed again by the
    space (the search), are both the default schedule again."""
    import tvm
    from tvm.s_tir import Schedule
    from tvm.s_tir.schedule import Trace

    from tuner.schedule.default_schedule import _postprocs, heuristic_schedule

    task, target = _conv_24_task()
    mod = task.dispatched[0]
    default = heuristic_schedule(mod["main"], target, LANES)
    assert "T.unroll(T.int64(3))" in default.mod.script()
    replayed = Schedule(mod)
    Trace.apply_json_to_schedule(default.trace.as_json(), replayed)
    tvm.ir.assert_structural_equal(replayed.mod, default.mod)
    searched = Schedule(mod)
    default.trace.apply_to_schedule(searched, remove_postproc=True)
    searched.enter_postproc()
    assert all(p.apply(searched) for p in _postprocs(LANES))
    tvm.ir.assert_structural_equal(searched.mod, default.mod)


def test_a_pool_over_480_channels_keeps_its_default_schedule():
    """The pooling rule vectorises 480 channels 48 at a time (6 vectors); the split must run before the reduction
    is decomposed into init and update blocks, where vectorising the update's loop is refused: in that order the
    default schedule of the recognizer's pool was lost (unscheduled), and so was every candidate of its search."""
    import tvm
    from tvm import relax
    from tvm.script import ir as I
    from tvm.script import relax as R

    from tuner.core.target import resolve_target
    from tuner.schedule.default_schedule import heuristic_schedule

    @I.ir_module
    class Pool:
        @R.function
        def main(x: R.Tensor((1, 3, 80, 480), "float32")):
            with R.dataflow():
                y = R.nn.avg_pool2d(x, pool_size=(3, 2), strides=(3, 2), layout="NHWC")
                R.output(y)
            return y

    mod = relax.transform.LegalizeOps()(Pool)
    (func,) = [f for f in mod.functions.values() if isinstance(f, tvm.tirx.PrimFunc)]
    func = func.with_attr("global_symbol", "main")  # a kernel of its own, as a task's module holds it
    target = resolve_target("llvm").tvm_target()
    sch = heuristic_schedule(func, target, LANES)
    assert sch is not None
    script = sch.mod.script()
    assert set(_vector_extents(script)) == {8} and "T.unroll(T.int64(6))" in script
    lib = tvm.compile(sch.mod, target=target)
    x = np.random.default_rng(1).standard_normal((1, 3, 80, 480)).astype("float32")
    out = tvm.runtime.empty((1, 1, 40, 480), "float32")
    lib["main"](tvm.runtime.tensor(x), out)
    want = x.reshape(1, 1, 3, 40, 2, 480).mean(axis=(2, 4))
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-5, atol=1e-5)
