"""Vectorisable transcendental functions: exp, sigmoid and softmax as polynomial approximations.

TVM lowers `exp` to LLVM's exp intrinsic, which x86 LLVM without a vector math library turns into one libm call
per element: a SiLU (x * sigmoid(x)) after every conv of YOLOv8n, or GELU's erf in a transformer, runs scalar.
TOPI's fast_exp is built from multiplies and adds that vectorise (relative error ~1e-7 against libm, well inside
the verification tolerance). Applied after the strategies' graph passes (their patterns match the exact ops) and
before legalization, to float32 only.

Not tanh and erf, although TOPI has fast_tanh and fast_erf: those polynomials read their input many times, and
once fusion and the schedule inline a producer into them, the producer is recomputed per read: `compare` measured
18x the FLOPs of the unfused graph on tanh(sigmoid(x)) (its redundant-work dimension caught it).
"""

from __future__ import annotations


def FastMath():  # noqa: N802  (a pass, named as TVM names its passes)
    import tvm

    return tvm.transform.module_pass(lambda mod, ctx: fast_math(mod), opt_level=0, name="FastMath")


def fast_math(mod):
    from tvm import relax, topi
    from tvm.relax import PyExprMutator, expr_functor

    def fp32(call) -> bool:
        return str(getattr(call.args[0].ty, "dtype", "")) == "float32"

    def fast_sigmoid(x):
        from tvm import te

        e = topi.fast_exp(te.compute(x.shape, lambda *i: -x(*i), name="neg"))
        return te.compute(x.shape, lambda *i: 1.0 / (1.0 + e(*i)), name="sigmoid")

    rules = {
        "relax.exp": lambda bb, c: bb.call_te(topi.fast_exp, c.args[0]),
        "relax.sigmoid": lambda bb, c: bb.call_te(fast_sigmoid, c.args[0]),
        "relax.nn.softmax": lambda bb, c: bb.call_te(topi.nn.fast_softmax, c.args[0], c.attrs.axis),
    }

    @expr_functor.mutator
    class Rewriter(PyExprMutator):
        def visit_call_(self, call):
            call = super().visit_call_(call)
            rule = rules.get(getattr(call.op, "name", ""))
            return rule(self.builder_, call) if rule is not None and fp32(call) else call

    rewriter = Rewriter(mod)
    for gv, func in mod.functions_items():
        if isinstance(func, relax.Function):
            rewriter.builder_.update_func(gv, rewriter.visit_expr(func))
    return rewriter.builder_.get()
