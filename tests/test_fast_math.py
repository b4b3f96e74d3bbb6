"""Fast math on CPU: tanh and erf become a vectorisable polynomial at llvm codegen, exp/sigmoid/softmax are
rewritten in Relax. Checked on the compiled code and its numbers, not on timing."""

import math
import re

import numpy as np
import pytest

tvm = pytest.importorskip("tvm")


def _compiled(fn, dtype="float32", n=4096):
    from tvm import te

    import tuner.legalize.fast_math  # noqa: F401  (registers the llvm rules)

    x = te.placeholder((n,), name="x", dtype=dtype)
    # a producer in front, as fusion leaves it: the rule must evaluate it once, not once per polynomial term
    y = te.compute(x.shape, lambda i: fn(x[i] * 2.0 + 1.0), name="y")
    func = te.create_prim_func([x, y])
    return func, tvm.compile(func, target="llvm")


def _called(executable) -> set[str]:
    return set(re.findall(r"call [^@]*@([\w.]+)", executable.mod.inspect_source("ll")))


@pytest.mark.parametrize("name,reference", [("tanh", np.tanh), ("erf", np.vectorize(math.erf))])
def test_tanh_and_erf_compile_to_polynomials_without_libm_calls(name, reference):
    from tvm import te

    func, exe = _compiled(getattr(te, name))
    called = _called(exe)
    assert not {c for c in called if re.search(r"exp|tanh|erf", c)}, called
    x = np.concatenate([np.linspace(-20, 20, 4000), np.linspace(-1e-3, 1e-3, 96)]).astype("float32")
    out = tvm.runtime.tensor(np.zeros_like(x))
    exe(tvm.runtime.tensor(x), out)
    expected = reference(x.astype("float64") * 2 + 1)
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-6, atol=1e-6)
    # TIR still holds T.tanh/T.erf: FLOP counts see the producer's multiply and add once, no polynomial terms
    assert f"T.{name}(" in func.script()
    assert tvm.s_tir.analysis.estimate_tir_flops(tvm.IRModule({"main": func})) == 2 * 4096


def test_float64_tanh_keeps_tvms_rule():
    from tvm import te

    _, exe = _compiled(te.tanh, dtype="float64", n=64)
    x = np.linspace(-3, 3, 64)
    out = tvm.runtime.tensor(np.zeros(64))
    exe(tvm.runtime.tensor(x), out)
    np.testing.assert_allclose(out.numpy(), np.tanh(x * 2 + 1), rtol=1e-12, atol=1e-12)


def test_relax_exp_sigmoid_softmax_become_topi_fast_versions():
    from tvm import relax
    from tvm.script import ir as I
    from tvm.script import relax as R

    from tuner.legalize.fast_math import fast_math

    @I.ir_module
    class Before:
        @R.function
        def main(x: R.Tensor((4, 8), "float32")):
            with R.dataflow():
                a = R.exp(x)
                b = R.sigmoid(a)
                c = R.nn.softmax(b, axis=-1)
                d = R.tanh(c)
                R.output(d)
            return d

    after = fast_math(Before)
    ops = set(re.findall(r"R\.(\w+(?:\.\w+)?)\(", after["main"].script()))
    names = {gv.name_hint for gv, f in after.functions.items() if not isinstance(f, relax.Function)}
    assert {"exp", "sigmoid", "nn.softmax"}.isdisjoint(ops)
    assert "tanh" in ops  # left for the llvm rule
    assert any("fast_exp" in n for n in names) and any("fast_softmax" in n for n in names)
