"""TOPI's pooling blocks name MetaSchedule rules TVM 0.27 does not ship; ours fall through to the generic rules
without TVM's C++ warning (which reached the terminal on every tune, past -q)."""

import re

import tvm
from tvm import relax
from tvm.script import ir as I
from tvm.script import relax as R


def _pool_task():
    from tvm.s_tir import meta_schedule as ms

    @I.ir_module
    class Pool:
        @R.function
        def main(x: R.Tensor((1, 16, 32, 32), "float32")):
            with R.dataflow():
                y = R.nn.max_pool2d(x, pool_size=[2, 2], strides=[2, 2])
                z = R.nn.avg_pool2d(y, pool_size=[2, 2], strides=[2, 2])
                R.output(z)
            return z

    mod = relax.transform.LegalizeOps()(Pool)
    return ms.relax_integration.extract_tasks(mod, tvm.target.Target({"kind": "llvm", "num-cores": 2}))


def test_pool_blocks_are_scheduled_without_the_unknown_rule_warning(capfd):
    from tvm.s_tir import meta_schedule as ms

    from tuner.tuning.spaces import bare_context

    nhwc = ms.relax_integration.extract_tasks(_pooled("NHWC"), tvm.target.Target({"kind": "llvm", "num-cores": 2}))
    tasks = _pool_task() + list(nhwc)  # NHWC: the CPU rule's schedules go on to TVM's other rules
    scripts = [(t, t.dispatched[0].script()) for t in tasks]
    assert any('"meta_schedule.pool_max"' in s for _, s in scripts)  # TOPI still asks for the rule by name
    assert any('"meta_schedule.pool_avg"' in s for _, s in scripts)
    capfd.readouterr()
    for task, _ in scripts:
        spaces = bare_context(task, "post-order-apply").generate_design_space()
        assert spaces and all("schedule_rule" not in sch.mod.script() for sch in spaces)
    err = capfd.readouterr().err
    assert "Unknown schedule rule" not in err, err


def _pooled(layout: str, channels: int = 32):
    """An NHWC or NCHW model of a padded 3x3/2 max pool and a padded 3x3/1 average pool (padding not counted)."""
    shape = (1, 9, 9, channels) if layout == "NHWC" else (1, channels, 9, 9)
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(shape, "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(relax.op.nn.max_pool2d(x, [3, 3], [2, 2], [1, 1, 1, 1], layout=layout))
            z = bb.emit_output(relax.op.nn.avg_pool2d(y, [3, 3], [1, 1], [1, 1, 1, 1], layout=layout))
        bb.emit_func_output(z)
    return relax.transform.LegalizeOps()(bb.get())


def _reference_pools(x):
    """numpy: NHWC max pool 3x3/2 then average pool 3x3/1, padding excluded from both."""
    import numpy as np

    def pool(a, stride, reduce):
        p = np.pad(a, ((0, 0), (1, 1), (1, 1), (0, 0)), constant_values=np.nan)
        h, w = (a.shape[1] - 1) // stride + 1, (a.shape[2] - 1) // stride + 1
        out = np.empty((1, h, w, a.shape[3]), "float32")
        for i in range(h):
            for j in range(w):
                out[0, i, j] = reduce(p[0, i * stride : i * stride + 3, j * stride : j * stride + 3], axis=(0, 1))
        return out

    return pool(pool(x, 2, np.nanmax), 1, np.nanmean)


def test_channels_last_pools_vectorise_channels_without_a_padded_copy():
    """NHWC pooling (the CPU layout leaves every pool NHWC): the default schedule inlines the padding and runs the
    window's loops outside a vector of channels; before (SCALAR_POOLS) a pass wrote the padded input out and the
    window ran innermost, scalar. NCHW pools, whose window slides along the innermost axis, keep the generic
    schedule. The built kernels match numpy either way."""
    import numpy as np

    from tuner.core.target import resolve_target
    from tuner.schedule.default_schedule import schedule_untuned
    from tuner.schedule.recipes import SCALAR_POOLS

    spec = resolve_target("llvm")
    x = np.random.default_rng(0).standard_normal((1, 9, 9, 32)).astype("float32")
    want = _reference_pools(x)
    for layout, recipe, padded in [("NHWC", None, False), ("NHWC", SCALAR_POOLS, True), ("NCHW", None, True)]:
        mod, names = schedule_untuned(_pooled(layout), spec, **({"recipe": recipe} if recipe else {}))
        assert len(names) == 2, names
        for name in names:
            script = mod[name].script()
            assert ('T.sblock("pad_temp")' in script) == padded, (layout, recipe, script)
            window_then_vector = re.search(r"for rv0, rv1 in T\.grid\([^\n]*\n\s*for \w+ in T\.vectorized", script)
            assert bool(window_then_vector) == (not padded), (layout, recipe, script)
        ex = tvm.compile(mod, target=spec.tvm_target())
        feed = x if layout == "NHWC" else x.transpose(0, 3, 1, 2)
        got = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(feed)).numpy()
        got = got if layout == "NHWC" else got.transpose(0, 2, 3, 1)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_channel_axes_wider_than_64_are_vectorised_in_chunks():
    """ParallelizeVectorizeUnroll vectorises at most 64 lanes: 200 channels (PP-OCR's classifier) ran scalar until
    the pool rule split them into 5 chunks of 40; still the numpy result."""
    import numpy as np

    from tuner.core.target import resolve_target
    from tuner.schedule.custom_rules import _vector_chunk
    from tuner.schedule.default_schedule import schedule_untuned

    assert [_vector_chunk(w) for w in (32, 64, 200, 2048, 120, 67, 130)] == [None, None, 40, 64, 40, None, None]
    spec = resolve_target("llvm")
    mod, names = schedule_untuned(_pooled("NHWC", channels=200), spec)
    # 40 lanes; with 8-lane vectors (AVX2) as 5 of them, unrolled (schedule/vector_split.py)
    window_then_40_lanes = (
        r"for rv0, rv1 in T\.grid\([^\n]*\n\s*for \w+ in "
        r"(T\.vectorized\(T\.int64\(40\)|T\.unroll\(T\.int64\(5\)\):\n\s*for \w+ in T\.vectorized\(T\.int64\(8\))"
    )
    for name in names:
        assert re.search(window_then_40_lanes, mod[name].script()), name
    x = np.random.default_rng(1).standard_normal((1, 9, 9, 200)).astype("float32")
    ex = tvm.compile(mod, target=spec.tvm_target())
    got = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    np.testing.assert_allclose(got, _reference_pools(x), rtol=1e-5, atol=1e-6)
