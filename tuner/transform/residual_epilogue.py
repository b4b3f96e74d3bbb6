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
    return out


def _rewrite_function(func):
    """`func` rewritten, or None when it holds no such add. The reshape after the add gets a variable of its own,
    named after the Reshape, that every later read of the add's variable is remapped to (by TVM's mutator, into
    any nesting), so plans and profiles keep the ONNX names where they belong."""
    from tvm import relax
    from tvm.relax import PyExprMutator, expr_functor

    bound = {b.var: b.value for block in func.body.blocks for b in block.bindings if isinstance(b, relax.VarBinding)}
    uses = use_counts(func)
    plans = {var: plan for var, value in bound.items() if (plan := _plan(value, bound, uses)) is not None}
    if not plans:
        return None
    dropped = {plan[0] for plan in plans.values()}  # the reshapes before the adds: read by their add only

    @expr_functor.mutator
    class Sink(PyExprMutator):
        def visit_var_binding_(self, binding):
            if binding.var in dropped:
                return
            if binding.var not in plans:
                return super().visit_var_binding_(binding)
            reshaped, side = plans[binding.var]
            source, shape = bound[reshaped].args
            other = self.visit_expr(binding.value.args[1 - side])
            residual = self.builder_.emit(relax.op.reshape(other, shape_values(source)), reshaped.name)
            source = self.visit_expr(source)
            pair = (source, residual) if side == 0 else (residual, source)
            summed = self.builder_.emit(relax.op.add(*pair), binding.var.name)
            back = type(binding.var)(reshaped.name, binding.var.ty)  # a Var when the add's result leaves the block
            self.builder_.emit_normalized(
                relax.VarBinding(back, self.builder_.normalize(relax.op.reshape(summed, shape)))
            )
            self.set_var_remap(binding.var, back)

    return Sink().visit_expr(func)


def _plan(value, bound, uses):
    """(the reshape's var, which argument of the add it is) when `value` is `add(reshape(a), r)` as the module's
    docstring describes, else None."""
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
        if shape_values(source) is not None and same_shape(other, value) and same_shape(reshaped, value):
            return reshaped, side
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
