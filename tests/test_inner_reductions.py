"""Reductions over the innermost axes (NCHW global pooling, a sum over the last axis) read each element's run in
vectors of partial results (`schedule.inner_reductions`); the built kernels match numpy, and other reductions
(over outer axes, a conv, a softmax's row) are not taken."""

import re

import numpy as np
import pytest
import tvm
from test_column_reductions import _module, scheduled_reductions
from tvm import relax

CASES = [  # (input shape, Relax reduction, numpy reference)
    ((1, 480, 6, 80), lambda y: relax.op.mean(y, axis=[2, 3], keepdims=True), lambda a: a.mean((2, 3), keepdims=True)),
    ((1, 1024, 14, 14), lambda y: relax.op.mean(y, axis=[2, 3]), lambda a: a.mean((2, 3))),
    ((2, 64, 96), lambda y: relax.op.sum(y, axis=[2]), lambda a: a.sum(2)),
    ((3, 40, 48), lambda y: relax.op.max(y, axis=[2], keepdims=True), lambda a: a.max(2, keepdims=True)),
]


@pytest.mark.parametrize("shape, reduce, reference", CASES)
def test_inner_reductions_sum_in_vectors(shape, reduce, reference):
    from tuner.schedule.recipes import SCALAR_INNER

    recipes = [None, SCALAR_INNER]
    for recipe, script in zip(recipes, scheduled_reductions(shape, reduce, reference, recipes)):
        # a partial-results buffer with the lanes last, filled by a vectorised loop (before: one scalar loop each)
        partials = "_rf = T.sblock_alloc_buffer(" in script
        in_vectors = re.search(r"T\.vectorized\([^\n]*\):\n\s*with T\.sblock\(\"\w+_rf(_update)?\"\)", script)
        assert bool(partials and in_vectors) == (recipe is None), (recipe, script)


def test_outer_reductions_convs_and_short_runs_are_not_inner():
    from tuner.schedule.inner_reductions import inner_reduction_schedule

    def prims(mod):
        return [f for f in mod.functions.values() if isinstance(f, tvm.tirx.PrimFunc)]

    columns = _module((1, 28, 28, 120), lambda y: relax.op.mean(y, axis=[1, 2], keepdims=True))
    short = _module((1, 64, 3, 3), lambda y: relax.op.sum(y, axis=[2, 3]))  # 9 elements: no vector
    w = relax.const(np.ones((8, 16, 3, 3), "float32"))
    conv = _module((1, 16, 10, 10), lambda y: relax.op.nn.conv2d(y, w))
    softmax = _module((4, 96), lambda y: relax.op.nn.softmax(y))
    for mod in (columns, short, conv, softmax):
        assert all(inner_reduction_schedule(f, 16) is None for f in prims(mod))
