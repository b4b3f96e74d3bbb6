"""The residual add moved into the projection's epilogue (tuner/transform/residual_epilogue.py): TVMScript before
and after, what must stay as it is, numerics, and the kernel FuseOps makes of it."""

import numpy as np
import pytest
import tvm
from tvm import relax
from tvm.script import ir as I  # noqa: E741
from tvm.script import relax as R

from tuner.transform.residual_epilogue import residual_into_epilogue

RNG = np.random.default_rng(0)
W = RNG.standard_normal((32, 32)).astype("float32")
B = RNG.standard_normal((32,)).astype("float32")


def _before(residual_first: bool = False):
    w, b = relax.const(W), relax.const(B)

    @I.ir_module
    class Before:
        @R.function
        def main(x: R.Tensor((1, 8, 32), "float32")) -> R.Tensor((1, 8, 32), "float32"):
            with R.dataflow():
                rows = R.reshape(x, R.shape([8, 32]))
                proj = R.add(R.matmul(rows, w), b)
                back = R.reshape(proj, R.shape([1, 8, 32]))
                out = R.add(x, back) if residual_first else R.add(back, x)
                R.output(out)
            return out

    return Before


def _expected(residual_first: bool = False):
    w, b = relax.const(W), relax.const(B)

    @I.ir_module
    class Expected:
        @R.function
        def main(x: R.Tensor((1, 8, 32), "float32")) -> R.Tensor((1, 8, 32), "float32"):
            with R.dataflow():
                rows = R.reshape(x, R.shape([8, 32]))
                proj = R.add(R.matmul(rows, w), b)
                residual = R.reshape(x, R.shape([8, 32]))
                summed = R.add(residual, proj) if residual_first else R.add(proj, residual)
                out = R.reshape(summed, R.shape([1, 8, 32]))
                R.output(out)
            return out

    return Expected


def _canonical(mod):
    return relax.transform.CanonicalizeBindings()(relax.transform.Normalize()(mod))


@pytest.mark.parametrize("residual_first", [False, True])
def test_the_reshape_after_a_projection_moves_below_the_residual_add(residual_first):
    after = residual_into_epilogue(_canonical(_before(residual_first)))
    tvm.ir.assert_structural_equal(_canonical(after), _canonical(_expected(residual_first)))


def test_the_rewrite_computes_what_the_model_computed():
    x = RNG.standard_normal((1, 8, 32)).astype("float32")
    outs = []
    for mod in (_before(), residual_into_epilogue(_canonical(_before()))):
        exe = tvm.compile(mod, target="llvm")
        vm = relax.VirtualMachine(exe, tvm.cpu())
        outs.append(vm["main"](tvm.runtime.tensor(x)).numpy())
    np.testing.assert_allclose(outs[0], outs[1], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(outs[0], x + (x.reshape(8, 32) @ W + B).reshape(1, 8, 32), rtol=1e-5, atol=1e-5)


def test_what_the_rewrite_must_leave_alone():
    w, b = relax.const(W), relax.const(B)

    @I.ir_module
    class ReshapeReadTwice:  # the reshaped projection is an output too: its reshape stays where it is
        @R.function
        def main(x: R.Tensor((1, 8, 32), "float32")):
            with R.dataflow():
                proj = R.add(R.matmul(R.reshape(x, R.shape([8, 32])), w), b)
                back = R.reshape(proj, R.shape([1, 8, 32]))
                out = R.add(back, x)
                R.output(out, back)
            return (out, back)

    @I.ir_module
    class Broadcast:  # a bias-like operand broadcast along the rows: no same-shaped residual to reshape
        @R.function
        def main(x: R.Tensor((1, 8, 32), "float32"), y: R.Tensor((1, 1, 32), "float32")):
            with R.dataflow():
                proj = R.matmul(R.reshape(x, R.shape([8, 32])), w)
                out = R.add(R.reshape(proj, R.shape([1, 8, 32])), y)
                R.output(out)
            return out

    @I.ir_module
    class NoAnchor:  # a reshape of an input: no kernel's epilogue for the add to join
        @R.function
        def main(x: R.Tensor((8, 32), "float32"), y: R.Tensor((1, 8, 32), "float32")):
            with R.dataflow():
                out = R.add(R.reshape(x, R.shape([1, 8, 32])), y)
                R.output(out)
            return out

    for mod in (ReshapeReadTwice, Broadcast, NoAnchor):
        mod = _canonical(mod)
        tvm.ir.assert_structural_equal(residual_into_epilogue(mod), mod)


def test_fuseops_puts_the_residual_into_the_projections_kernel():
    """Through the pipeline's graph algebra and FuseOps: one kernel computes matmul, bias and residual, where the
    reshape used to leave the add in a kernel of its own."""
    from tuner.core.target import resolve_target
    from tuner.fusion import get_strategy
    from tuner.pipeline import lower

    def kernels(algebra: bool):
        lowered = lower(_before(), resolve_target("llvm"), get_strategy("tvm"), algebra=algebra)
        return sorted(gv.name_hint for gv, f in lowered.functions_items() if isinstance(f, tvm.tirx.PrimFunc))

    assert any("add" in k for k in kernels(False) if "matmul" not in k)  # the residual add stood alone
    fused = kernels(True)
    assert [k for k in fused if "matmul" in k and k.count("add") == 2], fused
    assert not [k for k in fused if "add" in k and "matmul" not in k], fused
