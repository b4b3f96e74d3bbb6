"""The attention scale folded into the projections (tuner/transform/attention_scale.py): TVMScript before and
after, what must stay as it is, and numerics."""

import numpy as np
import tvm
from tvm import relax
from tvm.script import ir as I  # noqa: E741
from tvm.script import relax as R

from tuner.transform.attention_scale import fold_attention_scale

RNG = np.random.default_rng(0)
W = RNG.standard_normal((32, 32)).astype("float32")
B = RNG.standard_normal((32,)).astype("float32")
SCALE = 0.35355338  # (1/√64)^½ on both Q and K, as recent exporters write scaled dot-product attention


def _before():
    w, b = relax.const(W), relax.const(B)

    @I.ir_module
    class Before:
        @R.function
        def main(x: R.Tensor((8, 32), "float32")) -> R.Tensor((1, 4, 8, 8), "float32"):
            with R.dataflow():
                mm = R.matmul(x, w)
                proj = R.add(mm, b)
                heads = R.reshape(proj, R.shape([1, 8, 4, 8]))
                q = R.permute_dims(heads, axes=[0, 2, 1, 3])
                out = R.multiply(q, R.const(SCALE, "float32"))
                R.output(out)
            return out

    return Before


def _expected():
    w, b = relax.const(W * np.float32(SCALE)), relax.const(B * np.float32(SCALE))

    @I.ir_module
    class Expected:
        @R.function
        def main(x: R.Tensor((8, 32), "float32")) -> R.Tensor((1, 4, 8, 8), "float32"):
            with R.dataflow():
                mm = R.matmul(x, w)
                proj = R.add(mm, b)
                heads = R.reshape(proj, R.shape([1, 8, 4, 8]))
                out = R.permute_dims(heads, axes=[0, 2, 1, 3])
                R.output(out)
            return out

    return Expected


def _canonical(mod):
    return relax.transform.DeadCodeElimination()(relax.transform.CanonicalizeBindings()(mod))


def test_scale_after_the_heads_split_folds_into_the_projection():
    tvm.ir.assert_structural_equal(_canonical(fold_attention_scale(_before())), _canonical(_expected()))


def test_a_projection_read_elsewhere_keeps_its_scale():
    w, b = relax.const(W), relax.const(B)

    @I.ir_module
    class Shared:
        @R.function
        def main(x: R.Tensor((8, 32), "float32")):
            with R.dataflow():
                proj = R.add(R.matmul(x, w), b)
                q = R.permute_dims(R.reshape(proj, R.shape([1, 8, 4, 8])), axes=[0, 2, 1, 3])
                out = R.multiply(q, R.const(SCALE, "float32"))
                R.output(out, proj)  # proj is an output too: scaling its weights would change it
            return (out, proj)

    tvm.ir.assert_structural_equal(fold_attention_scale(Shared), Shared)


def test_a_scale_that_is_not_a_scalar_is_kept():
    w, b = relax.const(W), relax.const(B)
    per_head = relax.const(np.arange(1, 9, dtype="float32"))

    @I.ir_module
    class PerColumn:
        @R.function
        def main(x: R.Tensor((8, 32), "float32")):
            with R.dataflow():
                heads = R.reshape(R.add(R.matmul(x, w), b), R.shape([1, 8, 4, 8]))
                out = R.multiply(heads, per_head)
                R.output(out)
            return out

    tvm.ir.assert_structural_equal(fold_attention_scale(PerColumn), PerColumn)


def test_folded_module_computes_the_same():
    x = RNG.standard_normal((8, 32)).astype("float32")
    results = []
    for mod in (_before(), fold_attention_scale(_before())):
        ex = tvm.compile(mod, target="llvm")
        vm = relax.VirtualMachine(ex, tvm.cpu())
        results.append(vm["main"](tvm.runtime.tensor(x)).numpy())
    np.testing.assert_allclose(results[1], results[0], rtol=1e-5, atol=1e-5)
