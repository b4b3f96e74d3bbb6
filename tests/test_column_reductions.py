"""Reductions over outer axes (NHWC global pooling, a mean over tokens) run the kept axis in vectors, innermost
(`tuning.column_reductions`); the built kernels match numpy, and other reductions are not taken."""

import re

import numpy as np
import pytest
import tvm
from tvm import relax


def _module(shape, reduce):
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(shape, "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(relax.op.nn.relu(x))
            z = bb.emit_output(reduce(y))
        bb.emit_func_output(z)
    return relax.transform.FuseTIR()(relax.transform.FuseOps()(relax.transform.LegalizeOps()(bb.get())))


CASES = [  # (input shape, Relax reduction, numpy reference)
    ((1, 28, 28, 120), lambda y: relax.op.mean(y, axis=[1, 2], keepdims=True), lambda a: a.mean((1, 2), keepdims=True)),
    ((1, 7, 7, 960), lambda y: relax.op.mean(y, axis=[1, 2], keepdims=True), lambda a: a.mean((1, 2), keepdims=True)),
    ((1, 128, 384), lambda y: relax.op.max(y, axis=[1]), lambda a: a.max(1)),
    ((2, 50, 24), lambda y: relax.op.sum(y, axis=[1]), lambda a: a.sum(1)),
]


def scheduled_reductions(shape, reduce, reference, recipes):
    """For each recipe (None: the default): the reduction kernel's script under the default schedule, after its
    built module was checked against numpy on relu(x)."""
    from tuner.core.target import resolve_target
    from tuner.schedule.default_schedule import schedule_untuned

    spec = resolve_target("llvm")
    x = np.random.default_rng(0).standard_normal(shape).astype("float32")
    want = reference(np.maximum(x, 0))
    base = _module(shape, reduce)
    for recipe in recipes:
        mod, names = schedule_untuned(base, spec, **({"recipe": recipe} if recipe else {}))
        reductions = [n for n in names if "relu" not in n]  # FuseOps leaves the ReLU a kernel of its own
        assert len(reductions) == 1, names
        ex = tvm.compile(mod, target=spec.tvm_target())
        got = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        yield mod[reductions[0]].script()


@pytest.mark.parametrize("shape, reduce, reference", CASES)
def test_column_reductions_vectorise_the_kept_axis(shape, reduce, reference):
    from tuner.schedule.recipes import SCALAR_COLUMNS

    recipes = [None, SCALAR_COLUMNS]
    for recipe, script in zip(recipes, scheduled_reductions(shape, reduce, reference, recipes)):
        # the reduced axes' loops enclose a vectorised loop of the kept axis (before: one scalar loop per element)
        in_vectors = re.search(r"for k\d*, [^\n]*T\.grid\([^\n]*\n\s*for \w+ in T\.vectorized", script)
        assert bool(in_vectors) == (recipe is None), (recipe, script)


def test_reductions_over_the_innermost_axis_and_convs_are_not_columns():
    from tvm.s_tir import Schedule

    from tuner.schedule.column_reductions import column_schedule

    rows = _module((1, 64, 96), lambda y: relax.op.sum(y, axis=[2]))
    for gv, func in rows.functions.items():
        if isinstance(func, tvm.tirx.PrimFunc):
            assert column_schedule(func, 16, 2) is None, gv
    w = relax.const(np.ones((8, 3, 3, 16), "float32"))
    conv = _module((1, 10, 10, 16), lambda y: relax.op.nn.conv2d(y, w, data_layout="NHWC", kernel_layout="OHWI"))
    prims = [f for f in conv.functions.values() if isinstance(f, tvm.tirx.PrimFunc)]
    assert prims and all(column_schedule(f, 16, 2) is None for f in prims)
    assert Schedule(prims[0])  # still a schedulable kernel: the generic rules take it
