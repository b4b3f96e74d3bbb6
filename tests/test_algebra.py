"""Graph algebra before fusion: before/after structure, and numerics through a real build (BN folding)."""

import numpy as np
import tvm
from tvm import relax
from tvm.script import ir as I
from tvm.script import relax as R

from tuner.algebra import GraphAlgebra, SumToAdd


def test_sum_of_same_shape_operands_becomes_adds():
    @I.ir_module
    class Before:
        @R.function
        def main(a: R.Tensor((2, 3), "float32"), b: R.Tensor((2, 3), "float32"), c: R.Tensor((2, 3), "float32")):
            with R.dataflow():
                ab = R.broadcast_to(a, R.shape([2, 3]))
                s = R.stack((ab, b, c), axis=0)
                out = R.sum(s, axis=[0], keepdims=False)
                R.output(out)
            return out

    @I.ir_module
    class Expected:
        @R.function
        def main(a: R.Tensor((2, 3), "float32"), b: R.Tensor((2, 3), "float32"), c: R.Tensor((2, 3), "float32")):
            with R.dataflow():
                lv = R.add(a, b)
                out = R.add(lv, c)
                R.output(out)
            return out

    after = relax.transform.DeadCodeElimination()(SumToAdd()(Before))
    tvm.ir.assert_structural_equal(after, Expected)


def test_sum_over_other_axis_is_kept():
    @I.ir_module
    class Before:
        @R.function
        def main(a: R.Tensor((2, 3), "float32"), b: R.Tensor((2, 3), "float32")):
            with R.dataflow():
                s = R.stack((a, b), axis=1)
                out = R.sum(s, axis=[1], keepdims=False)
                R.output(out)
            return out

    tvm.ir.assert_structural_equal(SumToAdd()(Before), Before)


def _conv_bn_module(w, gamma, beta, mean, var):
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 3, 8, 8), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            conv = bb.emit(relax.op.nn.conv2d(x, relax.const(w), padding=1))
            consts = [relax.const(v) for v in (gamma, beta, mean, var)]
            bn = bb.emit(relax.op.nn.batch_norm(conv, *consts, axis=1, epsilon=1e-5))
            out = bb.emit_output(relax.TupleGetItem(bn, 0))
        bb.emit_func_output(out)
    return bb.get()


def test_batch_norm_folds_into_conv_and_keeps_numerics():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, 3, 3, 3)).astype("float32")
    gamma, beta, mean = (rng.standard_normal(4).astype("float32") for _ in range(3))
    var = rng.uniform(0.5, 2.0, 4).astype("float32")
    before = _conv_bn_module(w, gamma, beta, mean, var)
    after = GraphAlgebra()(before)
    ops = []
    relax.analysis.post_order_visit(
        after["main"].body, lambda e: ops.append(e.op.name) if isinstance(e, relax.Call) else None
    )
    assert "relax.nn.batch_norm" not in ops and ops.count("relax.nn.conv2d") == 1, ops

    x = rng.standard_normal((1, 3, 8, 8)).astype("float32")
    results = []
    for mod in (before, after):
        mod = relax.transform.DecomposeOpsForInference()(mod)
        ex = tvm.compile(mod, target="llvm")
        vm = relax.VirtualMachine(ex, tvm.cpu())
        results.append(vm["main"](tvm.runtime.tensor(x)).numpy())
    np.testing.assert_allclose(results[1], results[0], rtol=1e-4, atol=1e-4)
