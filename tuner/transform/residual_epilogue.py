"""Encoder fusion: the residual add moved into the projection's epilogue.

A transformer's output projections (attention output, feed-forward down) are exported as a 2-D Gemm between
two reshapes: `[1, S, H] -> [S, H]`, the matmul and its bias, `[S, H] -> [1, S, H]`, then the residual add.
FuseOps puts the bias into the matmul's kernel but stops at the reshape (an injective op after an anchor), so
the residual add runs as a kernel of its own that reads the projection's output back and writes it again, once
per projection (MiniLM-L3: 6 such kernels; the plan said "elemwise -> injective: not grouped by tvm"). The
reshape only relabels a contiguous tensor, so it can go after the add, with the residual reshaped the other way
(a view, no kernel):

    add(reshape(a, S), r)   a computed by a matmul or conv (through element-wise ops), r of shape S,
    ->  reshape(add(a, reshape(r, shape(a))), S)   the reshape and `a` read only here

FuseOps then fuses matmul, bias and residual into one kernel, whose epilogue reads the residual per output tile.
The bindings keep the model's names: the new add is named after the ONNX Add, the reshapes after the Reshape.
"""

from __future__ import annotations

from tuner.transform.dataflow_facts import same_shape, shape_values, use_counts

# producers whose output FuseOps can extend with an element-wise epilogue, and the element-wise ops that may sit
# between such a producer and the reshape (a bias add, an activation)
_ANCHORS = {"relax.matmul", "relax.nn.conv1d", "relax.nn.conv2d", "relax.nn.conv3d", "relax.linear"}
_ELEMENTWISE = {
    "relax.add",
    "relax.subtract",
    "relax.multiply",
    "relax.divide",
    "relax.nn.relu",
    "relax.nn.gelu",
    "relax.nn.gelu_tanh",
    "relax.nn.silu",
    "relax.sigmoid",
    "relax.tanh",
    "relax.erf",
}
_MAX_EPILOGUE = 6  # element-wise ops followed back from the reshape to its anchor


def residual_into_epilogue(mod):
    """`mod` with every add of a reshaped projection and a same-shaped tensor rewritten so the reshape comes after
    the add (see the module's docstring); the same module when nothing matched."""
    from tvm import relax

    out = mod
    for gv, func in mod.functions_items():
        if isinstance(func, relax.Function):
            new = _rewrite_function(func)
            if new is not None:
                out = out.clone() if out is mod else out
                out[gv] = new
    # a read of the add's variable this rewrite does not reach (inside an If's branch) would leave it dangling
    return out if out is mod or relax.analysis.check_well_formed(out) else mod


def _rewrite_function(func):
    """`func` rewritten, or None when it holds no such add. The bindings are rebuilt in order; the reshape after
    the add gets a variable of its own (named after the Reshape) that every later read of the add's variable is
    remapped to, so plans and profiles keep the ONNX names where they belong."""
    from tvm import relax

    bound = {b.var: b.value for block in func.body.blocks for b in block.bindings if isinstance(b, relax.VarBinding)}
    uses = use_counts(func)
    moved = {}  # the reshape's var -> None (dropped); the add's var -> its new bindings
    for var, value in bound.items():
        rewritten = _sunk(var, value, bound, uses)
        if rewritten is not None:
            reshaped, bindings = rewritten
            moved[reshaped] = None
            moved[var] = bindings
    if not moved:
        return None
    renamed = {var: bindings[-1].var for var, bindings in moved.items() if bindings}
    blocks = []
    for block in func.body.blocks:
        bindings = []
        for b in block.bindings:
            if isinstance(b, relax.VarBinding) and b.var in moved:
                bindings += [_renaming(n, renamed) for n in moved[b.var] or []]
            else:
                bindings.append(_renaming(b, renamed))
        kind = relax.DataflowBlock if isinstance(block, relax.DataflowBlock) else relax.BindingBlock
        blocks.append(kind(bindings))
    body = relax.SeqExpr(blocks, _substituted(func.body.body, renamed))
    return _normalized(relax.Function(func.params, body, func.ret_ty, func.is_pure, func.attrs))


def _renaming(binding, renamed):
    from tvm import relax

    if not isinstance(binding, relax.VarBinding):
        return binding
    return relax.VarBinding(binding.var, _substituted(binding.value, renamed))


def _substituted(expr, renamed):
    """`expr` with the variables of `renamed` replaced (a binding's value reads them as call arguments or tuple
    fields; deeper nesting does not occur in normalized Relax)."""
    from tvm import relax

    if isinstance(expr, relax.Var):
        return renamed.get(expr, expr)
    if isinstance(expr, relax.Call):
        args = [_substituted(a, renamed) for a in expr.args]
        if all(a.same_as(b) for a, b in zip(args, expr.args)):
            return expr
        return _normalized(relax.Call(expr.op, args, expr.attrs, expr.ty_args))
    if isinstance(expr, relax.Tuple):
        fields = [_substituted(f, renamed) for f in expr.fields]
        return expr if all(a.same_as(b) for a, b in zip(fields, expr.fields)) else _normalized(relax.Tuple(fields))
    if isinstance(expr, relax.TupleGetItem):
        inner = _substituted(expr.tuple_value, renamed)
        return expr if inner.same_as(expr.tuple_value) else _normalized(relax.TupleGetItem(inner, expr.index))
    return expr


def _sunk(var, value, bound, uses):
    """(the reshape's var, the bindings replacing `var = add(reshape(a), r)`), or None when the add is not one."""
    from tvm import relax

    if _op(value) != "relax.add" or len(value.args) != 2:
        return None
    for side in (0, 1):
        reshaped, other = value.args[side], value.args[1 - side]
        shape_call = bound.get(reshaped) if isinstance(reshaped, relax.Var) else None
        if _op(shape_call) != "relax.reshape" or uses.get(reshaped, 0) != 1 or other.same_as(reshaped):
            continue
        source = shape_call.args[0]
        if not isinstance(source, relax.Var) or uses.get(source, 0) != 1 or not _from_anchor(source, bound):
            continue
        source_shape = shape_values(source)
        if source_shape is None or not same_shape(other, value) or not same_shape(reshaped, value):
            continue
        residual = _normalized(relax.op.reshape(other, source_shape))
        fresh = type(reshaped)  # a DataflowVar inside a dataflow block, as the reshape's was
        residual_var = fresh(reshaped.name, residual.ty)
        summed = _normalized(relax.op.add(source, residual_var) if side == 0 else relax.op.add(residual_var, source))
        summed_var = fresh(var.name, summed.ty)
        back = _normalized(relax.op.reshape(summed_var, shape_call.args[1]))
        back_var = type(var)(reshaped.name, var.ty)  # the reshape, now after the add: later reads remapped to it
        return reshaped, [
            relax.VarBinding(residual_var, residual),
            relax.VarBinding(summed_var, summed),
            relax.VarBinding(back_var, back),
        ]
    return None


def _from_anchor(var, bound) -> bool:
    """Is `var` an anchor's output, directly or through a few element-wise ops (each followed by its first
    non-constant argument)?"""
    from tvm import relax

    for _ in range(_MAX_EPILOGUE + 1):
        value = bound.get(var)
        op = _op(value)
        if op in _ANCHORS:
            return True
        if op not in _ELEMENTWISE:
            return False
        inputs = [a for a in value.args if isinstance(a, relax.Var) and a in bound]
        if len(inputs) != 1:  # two computed operands (a residual already): not a plain epilogue chain
            return False
        var = inputs[0]
    return False


def _op(value) -> str:
    from tvm import relax

    return getattr(value.op, "name", "") if isinstance(value, relax.Call) else ""


def _normalized(expr):
    """`expr` with its type filled in (its arguments are variables that have theirs)."""
    from tvm import relax

    return relax.BlockBuilder().normalize(expr)
