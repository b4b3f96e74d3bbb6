"""The default schedules of our own (rows, column and inner reductions, data movement) on kernels with a symbolic
dimension, as a package for a range of shapes lowers them: each either schedules the kernel or leaves it to the
generic rules, never raises, and the built module matches numpy at two sizes of the range."""

import numpy as np
import pytest
import tvm
from test_column_reductions import _module
from tvm import relax

W = tvm.tirx.Var("w", "int64")

CASES = [  # (symbolic input shape, Relax op on relu(x), numpy reference, two sizes of w)
    ((1, 48, 6, W), lambda y: relax.op.mean(y, axis=[2, 3], keepdims=True), lambda a: a.mean((2, 3), keepdims=True)),
    ((1, W, 8, 32), lambda y: relax.op.mean(y, axis=[1, 2], keepdims=True), lambda a: a.mean((1, 2), keepdims=True)),
    ((W, 96), lambda y: relax.op.nn.softmax(y), lambda a: np.exp(a) / np.exp(a).sum(-1, keepdims=True)),
    ((4, W), lambda y: relax.op.nn.softmax(y), lambda a: np.exp(a) / np.exp(a).sum(-1, keepdims=True)),
    ((1, W, 4, 16), lambda y: relax.op.permute_dims(y, [0, 2, 3, 1]), lambda a: a.transpose(0, 2, 3, 1)),
    ((1, W, 32), lambda y: relax.op.max(y, axis=[1]), lambda a: a.max(1)),
]


@pytest.mark.parametrize("shape, op, reference", CASES)
def test_own_schedules_take_or_leave_symbolic_kernels(shape, op, reference):
    from tuner.core.target import resolve_target
    from tuner.schedule.default_schedule import schedule_untuned

    spec = resolve_target("llvm")
    mod, _ = schedule_untuned(_module(shape, op), spec)  # raised on a symbolic width before (inner reductions)
    vm = relax.VirtualMachine(tvm.compile(mod, target=spec.tvm_target()), tvm.cpu())
    rng = np.random.default_rng(0)
    for w in (40, 81):
        x = rng.standard_normal([w if not isinstance(d, int) else d for d in shape]).astype("float32")
        got = vm["main"](tvm.runtime.tensor(x)).numpy()
        np.testing.assert_allclose(got, reference(np.maximum(x, 0)), rtol=1e-5, atol=1e-5)
