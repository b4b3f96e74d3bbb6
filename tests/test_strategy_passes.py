"""Before/after structural tests of the strategies' graph passes, in TVM's own style, and the cost rule's verdicts
on hand-built graphs. No build, no hardware."""

import numpy as np
import tvm
from tvm.script import ir as I
from tvm.script import relax as R

from tuner.fusion import get_strategy

W = np.arange(12, dtype="float32").reshape(4, 3) / 10
B = np.ones(3, dtype="float32")
LLVM = tvm.target.Target("llvm")


def apply(strategy, mod):
    return tvm.transform.Sequential(strategy.graph_passes(LLVM, None))(mod)


def test_horizontal_merges_matmuls_sharing_an_input():
    @I.ir_module
    class Before:
        @R.function
        def main(x: R.Tensor((2, 4), "float32"), w0: R.Tensor((4, 3), "float32"), w1: R.Tensor((4, 5), "float32")):
            R.func_attr({"num_input": 1})
            with R.dataflow():
                a = R.matmul(x, w0)
                b = R.matmul(x, w1)
                out = (a, b)
                R.output(out)
            return out

    @I.ir_module
    class Expected:
        @R.function
        def main(x: R.Tensor((2, 4), "float32"), w0: R.Tensor((4, 3), "float32"), w1: R.Tensor((4, 5), "float32")):
            R.func_attr({"num_input": 1})
            with R.dataflow():
                lv = R.concat((w0, w1), axis=1)
                lv1 = R.matmul(x, lv, out_dtype="float32")
                lv2 = R.split(lv1, indices_or_sections=[3], axis=1)
                a = lv2[0]
                b = lv2[1]
                out = (a, b)
                R.output(out)
            return out

    tvm.ir.assert_structural_equal(apply(get_strategy("horizontal"), Before), Expected)


def _matmul_bias_relu():
    @I.ir_module
    class Before:
        @R.function
        def main(x: R.Tensor((2, 4), "float32")):
            R.func_attr({"num_input": 1})
            with R.dataflow():
                a = R.matmul(x, R.const(W))
                b = R.add(a, R.const(B))
                c = R.nn.relu(b)
                R.output(c)
            return c

    return Before


def test_patterns_closes_matmul_bias_relu_into_one_composite_function():
    @I.ir_module
    class Expected:
        @R.function(private=True)
        def fused_relax_matmul_relax_add_relax_nn_relu(
            x: R.Tensor((2, 4), "float32"), param_0: R.Tensor((4, 3), "float32"), param_1: R.Tensor((3,), "float32")
        ) -> R.Tensor((2, 3), "float32"):
            R.func_attr({"Composite": "ft.matmul_bias_relu", "Primitive": True})
            with R.dataflow():
                a = R.matmul(x, param_0)
                b = R.add(a, param_1)
                gv = R.nn.relu(b)
                R.output(gv)
            return gv

        @R.function
        def main(x: R.Tensor((2, 4), "float32")) -> R.Tensor((2, 3), "float32"):
            R.func_attr({"num_input": 1})
            cls = Expected
            with R.dataflow():
                gv = cls.fused_relax_matmul_relax_add_relax_nn_relu(x, R.const(W), R.const(B))
                R.output(gv)
            return gv

    tvm.ir.assert_structural_equal(apply(get_strategy("patterns"), _matmul_bias_relu()), Expected)


def test_cost_leaves_an_anchor_with_an_elementwise_epilogue_to_fuseops():
    """Nothing is materialised (no reduction behind a reduction): the graph stays as it is, and the log says why."""
    cost = get_strategy("cost")
    before = _matmul_bias_relu()
    tvm.ir.assert_structural_equal(apply(cost, before), before)
    assert cost.log and all(why.startswith("left to FuseOps") for _, _, why in cost.log)
    assert cost.decisions() == []  # not a refusal: nothing for the plan to report


LAYER_NORM = """
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor((ROWS, 64), "float32")):
        R.func_attr({"num_input": 1})
        with R.dataflow():
            mean = R.mean(x, axis=[-1], keepdims=True)
            centered = R.subtract(x, mean)
            sq = R.power(centered, R.const(2.0, "float32"))
            var = R.mean(sq, axis=[-1], keepdims=True)
            eps = R.add(var, R.const(1e-5, "float32"))
            std = R.sqrt(eps)
            norm = R.divide(centered, std)
            scaled = R.multiply(norm, R.const(2.0, "float32"))
            out = R.add(scaled, R.const(0.5, "float32"))
            R.output(out)
        return out
"""


def _layer_norm(rows: int):
    """Decomposed LayerNorm over the last axis of a (rows, 64) tensor: two means, one kernel under `cost`."""
    return tvm.script.from_source(LAYER_NORM.replace("ROWS", str(rows)))


def test_cost_fuses_a_small_layernorm_and_refuses_one_that_spills():
    small, big = get_strategy("cost"), get_strategy("cost")
    fused = apply(small, _layer_norm(8))  # 8 x 4 B of means behind a reduction: fits on chip
    composites = [f.attrs["Composite"] for f in fused.functions.values() if f.attrs and "Composite" in f.attrs]
    assert composites == ["ft.layer_norm"] and small.log[0][2].startswith("accepted: keeps")
    # 2^22 rows: 16 MiB of means kept behind the second reduction, over any L2 x cores budget met (≤ 8 MiB)
    rows = 1 << 22
    before = _layer_norm(rows)
    tvm.ir.assert_structural_equal(apply(big, before), before)
    assert any("exceeds the on-chip budget" in why for _, _, why in big.decisions())


def test_two_instances_keep_their_own_logs():
    a, b = get_strategy("cost"), get_strategy("cost")
    apply(a, _matmul_bias_relu())
    assert a.log and not b.log
