"""Vectorisable transcendental functions: exp, sigmoid, softmax, tanh and erf as polynomial approximations.

TVM lowers `exp` to LLVM's exp intrinsic, which x86 LLVM without a vector math library turns into one libm call
per element: a SiLU (x * sigmoid(x)) after every conv of YOLOv8n, or GELU's erf in a transformer, runs scalar.
TOPI's fast_exp is built from multiplies and adds that vectorise (relative error ~1e-7 against libm, well inside
the verification tolerance). Applied after the strategies' graph passes (their patterns match the exact ops) and
before legalization, to float32 only.

tanh and erf (GELU's two forms) stay `T.tanh`/`T.erf` in TIR, so FLOP counts, the cost model's features and
the schedule see one operation, and become a polynomial only when the kernel is compiled for llvm: an intrinsic
lowering rule (registered when this module is imported) binds the input to a `Let` and evaluates the float32
rational approximation of TOPI's fast_tanh/fast_erf (Eigen's) on it. TOPI's own versions at the Relax level read
their input at every term, so an inlined producer is recomputed per read (`compare` measured 18x the FLOPs of the
unfused graph on tanh(sigmoid(x))). TVM 0.27's llvm tanh is exp-based, one libm call per element: on magika's
conv epilogue (GELU-tanh and a max over 260k elements, default schedule) 1.97 ms against 0.59 ms.
"""

from __future__ import annotations

# Eigen's float32 rational approximations (as in TOPI): x * p(x^2) / q(x^2) on x clamped to +-bound.
# Coefficients highest degree first.
_RATIONAL = {
    "tirx.tanh": (
        9.0,
        (
            -2.76076847742355e-16,
            2.00018790482477e-13,
            -8.60467152213735e-11,
            5.12229709037114e-08,
            1.48572235717979e-05,
            6.37261928875436e-04,
            4.89352455891786e-03,
        ),
        (1.19825839466702e-06, 1.18534705686654e-04, 2.26843463243900e-03, 4.89352518554385e-03),
    ),
    "tirx.erf": (
        4.0,
        (
            -2.72614225801306e-10,
            2.77068142495902e-08,
            -2.10102402082508e-06,
            -5.69250639462346e-05,
            -7.34990630326855e-04,
            -2.95459980854025e-03,
            -1.60960333262415e-02,
        ),
        (
            -1.45660718464996e-05,
            -2.13374055278905e-04,
            -1.68282697438203e-03,
            -7.37332916720468e-03,
            -1.42647390514189e-02,
        ),
    ),
}


def rational(x, coefficients):
    """clamp(x) * p(clamp(x)^2) / q(clamp(x)^2) as a float32 TIR expression that evaluates `x` once (`x` a scalar
    or a vector of float32)."""
    from tvm import tirx

    bound, num, den = coefficients
    dtype = str(x.ty.dtype)  # float32 or float32xN: TIR's arithmetic broadcasts the scalar constants

    def const(value):
        return tirx.const(value, "float32")

    def horner(coeffs, z):
        acc = const(coeffs[0])
        for c in coeffs[1:]:
            acc = acc * z + const(c)
        return acc

    v, c, z = tirx.Var("v", dtype), tirx.Var("c", dtype), tirx.Var("z", dtype)
    clamped = tirx.max(tirx.min(v, const(bound)), const(-bound))
    value = tirx.Let(z, c * c, c * horner(num, z) / horner(den, z))
    return tirx.Let(v, x, tirx.Let(c, clamped, value))


def _register_llvm_rules():
    """float32 tanh and erf to `rational` when compiling for llvm; other dtypes keep TVM's rule."""
    import tvm
    from tvm import tirx

    for name, coefficients in _RATIONAL.items():
        default = tvm.ir.Op.get(name).get_attr("llvm.FLowerIntrinsic") or tvm.ir.Op.get(name).get_attr(
            "default.FLowerIntrinsic"
        )

        def rule(call, coefficients=coefficients, default=default):
            # scalar, or a vector where the loop was vectorised before intrinsics were lowered (hand kernels)
            if str(call.ty.dtype).split("x")[0] == "float32":
                return rational(call.args[0], coefficients)
            return default(call) if default is not None else call

        tirx.register_intrin_lowering(name, "llvm", f=rule, level=99)


_register_llvm_rules()


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
