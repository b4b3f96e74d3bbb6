"""Encoder fusion, first step: the attention scale folded into the Q and K projections' weights.

Transformer exports scale the attention scores after the heads are split: `(X·Wq + bq)` reshaped into heads,
transposed, then multiplied by 1/√d (or by d^-1/4 on both Q and K, as recent exporters write scaled dot-product
attention). FuseOps cannot put that multiply into the projection's kernel (a reshape and a transpose sit between
them), so it rides along with the transpose in a kernel of its own over the whole Q (or K) tensor. The scale is
a constant, so it folds into the weights and the bias at build time: X·(c·Wq) + c·bq, and the multiply is gone.

    multiply(permute_dims?(reshape(add(matmul(x, W), b))), c)   W, b, c constants, c a scalar; each value used
    ->       permute_dims?(reshape(add(matmul(x, c·W), c·b)))    only by the next (nothing else sees the change)
"""

from __future__ import annotations


def fold_attention_scale(mod):
    """`mod` with every scalar multiply after a constant projection's reshape (and transpose) folded into the
    projection's constants (see the module's docstring). The bindings keep their variables (and so the ONNX
    node names plans and profiles read): the matmul and the add get new constants, the multiply becomes an alias
    of its input, which CanonicalizeBindings removes."""
    from tvm import relax

    replace = {}  # handle of a bound value -> its new value (a Call with new constants, or a Var)
    for with_transpose in (True, False):
        pattern, parts = _pattern(with_transpose)
        _find(mod, pattern, parts, _single_use_values(mod), replace)
    if not replace:
        return mod
    out = mod.clone()
    for gv, func in mod.functions_items():
        if isinstance(func, relax.Function):
            out[gv] = _with_values_replaced(func, replace)
    return out


def _pattern(with_transpose: bool):
    from tvm.relax.dpl import is_const, is_op, wildcard

    x, w, b, c = wildcard(), is_const(), is_const(), is_const()
    mm = is_op("relax.matmul")(x, w)
    proj = is_op("relax.add")(mm, b)
    shaped = is_op("relax.reshape")(proj, wildcard())
    last = is_op("relax.permute_dims")(shaped) if with_transpose else shaped
    return is_op("relax.multiply")(last, c), (mm, proj, shaped, last, c)


def _find(mod, pattern, parts, single_use, replace) -> None:
    """Record in `replace` the new values of every match whose chain is read by the next value only (a projection
    read elsewhere must keep its scale)."""
    from tvm import relax
    from tvm.relax.dpl import rewrite_call

    mm, proj, shaped, last, c = parts

    def record(expr, matches):
        chain = [matches[p] for p in (mm, proj, shaped)] + ([matches[last]] if last is not shaped else [])
        scale = _scalar(matches[c])
        if scale is None or not all(_handle(v) in single_use for v in chain):
            return expr
        product, add = matches[mm], matches[proj]
        weight, bias = _value(product.args[1]), _value(add.args[1])
        new_w, new_b = relax.const(weight * scale, str(weight.dtype)), relax.const(bias * scale, str(bias.dtype))
        replace[_handle(product)] = relax.Call(product.op, [product.args[0], new_w], product.attrs)
        replace[_handle(add)] = relax.Call(add.op, [add.args[0], new_b], add.attrs)
        replace[_handle(expr)] = expr.args[0]  # the multiply: its input (a Var) as it is
        return expr

    for func in mod.functions.values():
        if isinstance(func, relax.Function):
            rewrite_call(pattern, record, func)


def _with_values_replaced(func, replace):
    from tvm import relax

    blocks = []
    for block in func.body.blocks:
        bindings = [
            relax.VarBinding(b.var, replace[_handle(b.value)])
            if isinstance(b, relax.VarBinding) and _handle(b.value) in replace
            else b
            for b in block.bindings
        ]
        kind = relax.DataflowBlock if isinstance(block, relax.DataflowBlock) else relax.BindingBlock
        blocks.append(kind(bindings))
    body = relax.SeqExpr(blocks, func.body.body)
    return relax.Function(func.params, body, func.ret_ty, func.is_pure, func.attrs)


def _single_use_values(mod) -> set:
    """Handles of the bound values (of every Relax function) whose variable is read exactly once."""
    from collections import Counter

    from tvm import relax

    handles = set()
    for func in mod.functions.values():
        if not isinstance(func, relax.Function):
            continue
        uses = Counter()

        def count(e, uses=uses):
            if isinstance(e, relax.Var):
                uses[e] += 1

        bound = {b.var: b.value for block in func.body.blocks for b in block.bindings}
        for value in bound.values():
            relax.analysis.post_order_visit(value, count)
        relax.analysis.post_order_visit(func.body.body, count)
        handles |= {_handle(value) for var, value in bound.items() if uses[var] == 1}
    return handles


def _handle(obj) -> int:
    return obj.__chandle__()  # the same object seen through two Python wrappers


def _value(expr):
    """The numpy value of a Relax constant, else None."""
    import tvm

    if not isinstance(expr, tvm.ir.expr.Constant):  # TVM 0.27's Relax constant
        return None
    data = getattr(expr, "data", None)
    return (data if data is not None else expr.value).numpy()


def _scalar(expr) -> float | None:
    """The value of a constant with one element (a scalar or all dims 1), else None."""
    value = _value(expr)
    return None if value is None or value.size != 1 else float(value.reshape(()))
