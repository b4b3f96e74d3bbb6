"""`patterns`: our library of vertical fusion patterns, matched on the Relax graph, then TVM FuseOps for the rest.

Matched with `FuseOpsByPattern` (highest priority first) after `FuseTransposeMatmul` and constant folding; each
match becomes one kernel through FuseTIR. The library (name: what it groups):

    attention        QK^T (x scale) (+ mask) -> softmax (-> x V): the score chain, with the V product when present
    residual_ln      residual Add -> LayerNorm
    layer_norm       LayerNorm, as `nn.layer_norm` or decomposed (mean, sub, pow, mean, add, sqrt, div, mul, add)
    softmax          decomposed softmax: exp(x - max x) / sum(exp(x - max x))
    conv_bn_act      Conv (+ bias) (+ inference BatchNorm) (+ ReLU | ReLU6/Clip | HardSigmoid | HardSwish | SiLU)
    matmul_bias_act  MatMul/Gemm + bias (+ ReLU | GELU (nn.gelu, Erf form, tanh form) | SiLU)

What FuseOps alone cannot do and patterns do: put a reduction behind a reduction (LayerNorm's two means,
softmax after QK^T, then the V product) into one kernel. Check functions reject a match whose weight is not a
constant; every rejection is logged in the strategy's decision log and shows up in the fusion plan as a boundary reason.
Ops left unmatched are grouped by FuseOps, as `tvm` does.
"""

from __future__ import annotations

from tuner.fusion.base import FuseOpsGrouping, register

PREFIX = "ft."


def _ops():
    from tvm.relax.dpl import is_const, is_op, wildcard

    def op(name, *args):
        return is_op(f"relax.{name}")(*args)

    return op, is_const, wildcard


def _activations(x):
    """x followed by one of the activations the library knows, or x itself."""
    op, const, wildcard = _ops()
    relu = op("nn.relu", x)
    from tvm.relax.dpl import is_call_tir

    # ReLU6 / Clip: the ONNX frontend emits clip as TE maximum then minimum (call_tir), or as relax ops
    clip = (
        op("clip", x, wildcard(), wildcard())
        | op("minimum", op("maximum", x, const()), const())
        | is_call_tir("minimum", [is_call_tir("maximum", [x, const()]), const()])
    )
    sigmoid = op("sigmoid", x)
    silu = op("multiply", x, sigmoid) | op("nn.silu", x)
    # HardSigmoid legalises from ONNX as clip(x * a + b, 0, 1); HardSwish = x * HardSigmoid(x)
    affine = op("add", op("multiply", x, const()), const())
    hsig = op("minimum", op("maximum", affine, const()), const()) | op("clip", affine, wildcard(), wildcard())
    # ...and HardSwish from ONNX's own HardSwish node as x * (clip(x + 3, 0, 6) / 6)
    relu6_shifted = op("divide", op("clip", op("add", x, const()), wildcard(), wildcard()), const())
    hswish = op("multiply", x, hsig) | op("multiply", x, relu6_shifted)
    gelu = op("nn.gelu", x) | op("nn.gelu_tanh", x)
    # Erf GELU as ONNX exporters write it: x * (erf(x / sqrt 2) + 1) * 0.5
    erf_gelu = op("multiply", op("multiply", x, op("add", op("erf", op("divide", x, const())), const())), const())
    erf_gelu2 = op("multiply", x, op("multiply", op("add", op("erf", op("multiply", x, const())), const()), const()))
    return {
        "relu": relu,
        "relu6": clip,
        "silu": silu,
        "hardswish": hswish,
        "hardsigmoid": hsig,
        "sigmoid": sigmoid,
        "gelu": gelu | erf_gelu | erf_gelu2,
    }


def _conv_patterns():
    op, const, wildcard = _ops()
    w = wildcard()
    conv = op("nn.conv2d", wildcard(), w) | op("nn.conv1d", wildcard(), w)
    biased = op("add", conv, const())
    heads = []
    for base_name, base in (("conv_bias", biased), ("conv", conv)):
        # DecomposeOpsForInference writes BatchNorm as ((x - mean) / sqrt(var + eps)) * gamma + beta
        bn = op("add", op("multiply", op("divide", op("subtract", base, const()), const()), const()), const())
        for stem_name, stem in ((base_name + "_bn", bn), (base_name, base)):
            acts = [(f"{stem_name}_{a}", p) for a, p in _activations(stem).items()] + [(stem_name, stem)]
            # a residual Add after the activation (or before it: conv -> bn -> add -> relu)
            # (each operand order is its own pattern: a match rejected by a check is not retried with the other)
            # a residual is another tensor: `+ 3` is HardSwish's own add, matched by the activation patterns
            heads += [(n + "_residual", op("add", p, ~const())) for n, p in acts]
            heads += [(n + "_residual_rhs", op("add", ~const(), p)) for n, p in acts]
            for side, res in (("", op("add", stem, ~const())), ("_rhs", op("add", ~const(), stem))):
                heads += [
                    (f"{stem_name}_residual{side}_{a}", p)
                    for a, p in _activations(res).items()
                    if a in ("relu", "relu6")
                ]
            heads += acts
    return [(n, p, {"weight": w}) for n, p in heads if n != "conv"]


def _matmul_patterns():
    op, const, wildcard = _ops()
    w = wildcard()
    mm = op("matmul", wildcard(), w)
    biased = op("add", mm, const()) | op("add", const(), mm)
    out = [(f"matmul_bias_{a}", p, {"weight": w}) for a, p in _activations(biased).items()]
    out += [(f"matmul_{a}", p, {"weight": w}) for a, p in _activations(mm).items() if a in ("gelu", "relu", "silu")]
    return out + [("matmul_bias", biased, {"weight": w})]


def _layer_norm(x):
    op, const, _ = _ops()
    centered = op("subtract", x, op("mean", x))
    var = op("mean", op("power", centered, const()))
    normed = op("divide", centered, op("sqrt", op("add", var, const())))
    return op("add", op("multiply", normed, const()), const()) | op("nn.layer_norm", x, const(), const())


def _softmax(x):
    op, _, _ = _ops()
    e = op("exp", op("subtract", x, op("max", x)))
    return op("divide", e, op("sum", e)) | op("nn.softmax", x)


def _attention_patterns():
    op, const, wildcard = _ops()
    k = wildcard()
    scores = op("matmul", wildcard(), op("permute_dims", k)) | op("matmul", wildcard(), k)
    scaled = op("multiply", scores, const()) | op("divide", scores, const())
    out = []
    for s_name, s in (("scaled", scaled), ("raw", scores)):
        for m_name, m in (("mask", op("add", s, wildcard())), ("", s)):
            probs = op("nn.softmax", m)
            out.append(
                (f"attention_{s_name}{'_' + m_name if m_name else ''}_v", op("matmul", probs, wildcard()), {"k": k})
            )
            out.append((f"attention_{s_name}{'_' + m_name if m_name else ''}", probs, {"k": k}))
    return out


def library() -> list[tuple[str, object, dict]]:
    """(name, pattern, annotations) in priority order: bigger groups first."""
    op, _, wildcard = _ops()
    residual = op("add", wildcard(), wildcard())
    return (
        _attention_patterns()
        + [
            ("residual_ln", _layer_norm(residual), {}),
            ("layer_norm", _layer_norm(wildcard()), {}),
            ("softmax", _softmax(wildcard()), {}),
        ]
        + _conv_patterns()
        + _matmul_patterns()
    )


def _external_inputs(expr, internal) -> list:
    from tvm import relax

    out = []
    if isinstance(expr, relax.Var):
        return [] if expr in internal else [expr]
    if isinstance(expr, relax.Call):
        for a in expr.args:
            out += _external_inputs(a, internal)
    elif isinstance(expr, relax.Tuple):
        for f in expr.fields:
            out += _external_inputs(f, internal)
    return out


def _acyclic(name, ctx, log: list) -> bool:
    """The group must not take as input something computed from its own members (FuseOpsByPattern does not
    check this; a residual Add matched after the activation can otherwise swallow its own producer)."""
    internal = set(ctx.matched_bindings.keys())
    inputs = {v for e in ctx.matched_bindings.values() for v in _external_inputs(e, internal)}
    seen, frontier = set(), list(internal)
    while frontier:
        v = frontier.pop()
        for user in ctx.var_usages.get(v, []):
            if user not in seen and user not in internal:
                if user in inputs:
                    log.append((name, user.name, "would form a cycle: an input depends on the group's own output"))
                    return False
                seen.add(user)
                frontier.append(user)
    return True


def _keys_not_constant(name, log: list):
    """Attention multiplies two activations; a constant K is a classifier head (MatMul + bias + Softmax)."""

    def check(ctx) -> bool:
        import tvm

        if isinstance(ctx.annotated_expr.get("k"), tvm.ir.expr.Constant):
            bound = ctx.value_to_bound_var.get(ctx.matched_expr)
            log.append((name, bound.name if bound is not None else "?", "K is a constant, not attention"))
            return False
        return True

    return check


def _weight_is_constant(name, log: list):
    def check(ctx) -> bool:
        import tvm

        w = ctx.annotated_expr.get("weight")
        if w is None or isinstance(w, tvm.ir.expr.Constant):
            return True
        bound = ctx.value_to_bound_var.get(ctx.matched_expr)
        log.append((name, bound.name if bound is not None else "?", "weight not constant"))
        return False

    return check


def check_for(name, ann, log: list):
    """The library's checks for one pattern: no cycle, plus the check of each annotated operand; rejections are
    appended to `log` as (pattern, bound var name, reason)."""
    checks = {"weight": _weight_is_constant, "k": _keys_not_constant}
    own = [checks[a](name, log) for a in ann if a in checks]
    return lambda ctx: _acyclic(name, ctx, log) and all(c(ctx) for c in own)


@register
class PatternFusion(FuseOpsGrouping):
    name = "patterns"
    description = "pattern library (FuseOpsByPattern), then TVM FuseOps"

    def graph_passes(self, target, params) -> list:
        from tvm import relax

        self.log.clear()
        patterns = [
            relax.transform.FusionPattern(PREFIX + name, pat, ann or None, check_for(name, ann, self.log))
            for name, pat, ann in library()
        ]
        return pattern_passes(patterns)


def pattern_passes(patterns) -> list:
    """FuseOpsByPattern with the library; FuseTransposeMatmul after it, so the attention pattern sees QK^T with
    its transpose."""
    from tvm import relax

    return [
        relax.transform.FoldConstant(),
        relax.transform.FuseOpsByPattern(patterns, bind_constants=False, annotate_codegen=False),
        relax.transform.FuseTransposeMatmul(),
    ]
