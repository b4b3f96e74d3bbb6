"""Layout transposes moved down the graph until they meet their inverse, after the convs' layout is chosen.

A conv converted to NHWC where the rest of the graph stays NCHW sits between two transposes. TVM's ConvertLayout
carries NHWC through the ops it has layout rules for and gives up elsewhere (a per-channel constant of rank 3, the
decomposed form of a batch-norm that follows a concat); the one-by-one fallback (tuner/layout.py) converts no
other op at all. Either way a transpose back to NCHW ends up between the conv and its bias, activation and the
next conv, and FuseOps cannot fuse through it: three kernels per conv, two of them full passes over memory.

    op(permute(y, P), ...)          -> permute(op(y, ...), P)      element-wise unary, binary with a constant or
                                                                   with an operand transposed the same way,
                                                                   concat, 2-D pools, mean/sum/max over axes
    permute(permute(y, P), Q)       -> permute(y, P[Q]), or y where that is the identity

Only the layout transposes (NCHW <-> NHWC) move; where one reaches the next conv's input transpose, both
disappear. A first pass moves only transposes with a single consumer, so their number never grows. A transpose
read twice (an activation written as x * f(x): hard-swish, SiLU) moves only in a second pass that lets every
consumer take its own copy; the copies meet again where the branches join. That pass is kept only when it leaves
fewer transposes of activations than the first (a copy stuck at a consumer that cannot move it would add one).
"""

from __future__ import annotations

import functools

import numpy as np

from tuner.transform.dataflow_facts import bound_value, constant_vars, use_counts

UNARY = (
    "abs", "astype", "ceil", "clip", "cos", "erf", "exp", "floor", "log", "negative", "round", "rsqrt", "sigmoid",
    "sin", "sqrt", "square", "tanh", "nn.relu", "nn.gelu", "nn.gelu_tanh", "nn.silu", "nn.leakyrelu",
)  # fmt: skip
BINARY = ("add", "subtract", "multiply", "divide", "maximum", "minimum", "power", "floor_divide")
POOLS = ("nn.max_pool2d", "nn.avg_pool2d")
REDUCTIONS = ("mean", "sum", "max", "min")
# NCHW <-> NHWC, the transposes a layout conversion makes; a model's own (attention heads) are left to the passes
# that match them (FuseTransposeMatmul)
LAYOUT_PERMUTATIONS = ([0, 3, 1, 2], [0, 2, 3, 1])
MAX_ROUNDS = 64  # each round moves every transpose at least one op; chains between convs are a few ops long


def sink_transposes(mod):
    """Every Relax function of `mod` with its transposes moved down as far as they go; `mod` itself when none
    moved."""
    from tvm import relax

    out = mod
    for gv, func in mod.functions.items():
        if not isinstance(func, relax.Function):
            continue
        new = _sink(func, shared=False)
        if _shared_transposes(new or func):
            both = _sink_shared(func)
            if both is not None and len(activation_transposes(both)) < len(activation_transposes(new or func)):
                new = both
        if new is not None:
            out = out.clone() if out is mod else out
            out[gv] = new
    return out


def _sink(func, shared: bool):
    """`func` with its transposes moved as far as they go (`shared`: those read more than once too), or None when
    none moved."""
    from tvm import relax

    new, changed = func, False
    for _ in range(MAX_ROUNDS):
        moved, moved_any = _sink_once(new, shared)
        if not moved_any:  # rewrite_call returns a new function even when nothing matched
            break
        new, changed = _keep_names(relax.analysis.remove_all_unused(moved)), True
    return new if changed else None


def _sink_shared(func):
    """The second pass, or None where it fails on a graph the first pass took: it only ever removes transposes, so
    the first pass's result is a correct fallback."""
    try:
        return _sink(func, shared=True)
    except Exception:  # noqa: BLE001  (an optimisation with a correct fallback; the build goes on)
        return None


def _keep_names(func):
    """The op a transpose moved below keeps its binding's name (the ONNX node the plan and the profile know it by):
    the rewrite binds `op(y)` to a new variable and gives the old name to the transpose after it. Both now carry
    the name, as a conv's layout transposes carry the conv's."""
    from tvm import relax
    from tvm.relax import PyExprMutator, expr_functor

    renamed = {}
    var2val = relax.analysis.get_var2val(func)
    for var, value in var2val.items():
        if _activation_transpose(value) and isinstance(value.args[0], relax.Var):
            renamed[value.args[0]] = var.name
    if not renamed:
        return func

    @expr_functor.mutator
    class Renamer(PyExprMutator):
        def visit_var_binding_(self, binding):
            name = renamed.get(binding.var)
            if name is None or binding.var.name == name:
                return super().visit_var_binding_(binding)
            value = self.visit_expr(binding.value)
            kind = relax.DataflowVar if isinstance(binding.var, relax.DataflowVar) else relax.Var
            var = kind(name, binding.var.ty)
            self.set_var_remap(binding.var, var)
            self.builder_.emit_normalized(relax.VarBinding(var, value))

    try:
        return Renamer().visit_expr(func)
    except Exception:  # noqa: BLE001  (names are for the plan and the profile only: never fail a build on them)
        return func


def activation_transposes(func) -> list:
    """The layout transposes of `func` that move data at run time (a constant's is folded at build time)."""
    from tvm import relax

    found = []
    relax.analysis.post_order_visit(func.body, lambda e: found.append(e) if _activation_transpose(e) else None)
    return found


def _activation_transpose(expr) -> bool:
    import tvm
    from tvm import relax

    if not (isinstance(expr, relax.Call) and getattr(expr.op, "name", "") == "relax.permute_dims"):
        return False
    axes = [int(a) for a in expr.attrs.axes] if expr.attrs.axes is not None else None
    return axes in LAYOUT_PERMUTATIONS and not isinstance(expr.args[0], tvm.ir.expr.Constant)


def _shared_transposes(func) -> bool:
    """Whether a layout transpose's result is read more than once (what the second pass could move)."""
    from tvm import relax

    uses = use_counts(func)
    return any(_activation_transpose(v) and uses.get(k, 0) > 1 for k, v in relax.analysis.get_var2val(func).items())


def _sink_once(func, shared: bool = False):
    """(func after one round, whether anything moved)."""
    from tvm.relax.dpl import rewrite_call

    sinker, moved = _Sinker(func, shared), []

    def rewrite(expr, matches):
        out = sinker.rewrite(expr, matches)
        if not out.same_as(expr):
            moved.append(out)
        return out

    return rewrite_call(_movable_ops(), rewrite, func), bool(moved)


def _movable_ops():
    """One pattern matching a call of any op a transpose can move below."""
    return call_of_any(("permute_dims", "concat", *UNARY, *BINARY, *POOLS, *REDUCTIONS))


@functools.cache
def call_of_any(names: tuple):
    """One dataflow pattern matching a call of any of these Relax ops (BINARY ones with two operands), built once."""
    from tvm.relax.dpl import is_op, wildcard

    pattern = None
    for name in names:
        arity = 2 if name in BINARY else 1  # clip's bounds: matched by the trailing wildcard
        p = is_op(f"relax.{name}")(*[wildcard() for _ in range(arity)], varg_default_wildcard=True)
        pattern = p if pattern is None else pattern | p
    return pattern


def elementwise_view(expr, view_of):
    """For a call of an element-wise op (UNARY, or BINARY: both operands read), `(k, found, binary)` where `found`
    holds `view_of(operand)` per operand and operand k is the first it recognised; None when it recognised none,
    or `expr` is not a call. The graph rewrites that move a view (a slice, a reshape) below such ops start here."""
    from tvm import relax

    if not isinstance(expr, relax.Call):
        return None
    binary = expr.op.name.removeprefix("relax.") in BINARY
    found = [view_of(arg) for arg in expr.args[: 2 if binary else 1]]
    k = next((i for i, f in enumerate(found) if f is not None), None)
    return None if k is None else (k, found, binary)


class _Sinker:
    """One round's rewrite, reading operands through the function's bindings as they were at its start."""

    def __init__(self, func, shared: bool = False):
        from tvm import relax

        self.shared = shared  # move a transpose read more than once (each reader then takes its own copy)
        self.var2val = relax.analysis.get_var2val(func)
        self.uses = use_counts(func)
        self.constant = constant_vars(func)

    def rewrite(self, expr, _matches):
        from tvm import relax

        if not isinstance(expr, relax.Call):  # the matcher can hand over a variable bound to a matching call
            return expr
        name = expr.op.name.removeprefix("relax.")
        if name == "permute_dims":
            return self._compose(expr)
        if name == "concat":
            return self._concat(expr)
        if name in BINARY:
            return self._binary(expr)
        t = self._transposed(expr.args[0])
        if t is None:
            return expr
        y, perm = t
        if name in UNARY:
            return _permute(_with_first_arg(expr, y), perm)
        if name in POOLS:
            return self._pool(expr, y, perm)
        return self._reduction(expr, y, perm)

    def _value(self, arg):
        return bound_value(self.var2val, arg)

    def _transposed(self, arg, single_use=True):
        """(y, P) where `arg` is permute_dims(y, P) (consumed only here unless single_use=False), else None."""
        from tvm import relax

        value = self._value(arg)
        if not (isinstance(value, relax.Call) and getattr(value.op, "name", "") == "relax.permute_dims"):
            return None
        if single_use and not self.shared and self.uses.get(arg, 0) != 1:
            return None
        perm = [int(a) for a in value.attrs.axes] if value.attrs.axes is not None else None
        return (value.args[0], perm) if perm in LAYOUT_PERMUTATIONS else None

    def _compose(self, expr):
        t = self._transposed(expr.args[0], single_use=False)  # composing never adds a transpose
        if t is None:
            return expr
        y, inner = t
        outer = [int(a) for a in expr.attrs.axes] if expr.attrs.axes is not None else None
        if outer not in LAYOUT_PERMUTATIONS:
            return expr
        combined = [inner[a] for a in outer]
        return y if combined == sorted(combined) else _permute(y, combined)

    def _binary(self, expr):
        import tvm
        from tvm import relax

        a, b = expr.args
        ta, tb = self._transposed(a), self._transposed(b)
        if ta and tb:
            if ta[1] != tb[1]:
                return expr
            return _permute(relax.Call(expr.op, [ta[0], tb[0]], expr.attrs, expr.ty_args), ta[1])
        t, other, left = (ta, b, True) if ta else (tb, a, False)
        if t is None or not _same_shape(expr, a if left else b):
            return expr  # the other operand would broadcast the transposed one to a larger shape
        const = self._value(other)
        if isinstance(const, tvm.ir.expr.Constant) and const.value.numpy().ndim <= len(t[1]):
            moved = _constant_before(const, t[1])
        elif other in self.constant and len(other.ty.shape) <= len(t[1]):
            moved = _operand_before(other, t[1])  # folded with the other constants at build time
        else:
            return expr
        args = [t[0], moved] if left else [moved, t[0]]
        return _permute(relax.Call(expr.op, args, expr.attrs, expr.ty_args), t[1])

    def _concat(self, expr):
        from tvm import relax

        fields = self._value(expr.args[0])
        if not isinstance(fields, relax.Tuple) or not len(fields.fields):
            return expr
        moved = [self._transposed(f) for f in fields.fields]
        if any(m is None or m[1] != moved[0][1] for m in moved):
            return expr
        perm = moved[0][1]
        axis = int(expr.attrs.axis) % len(perm)
        joined = relax.op.concat([m[0] for m in moved], axis=perm[axis])
        return _permute(joined, perm)

    def _pool(self, expr, y, perm):
        from tvm import relax

        a = expr.attrs
        layout = str(a.layout)
        if str(a.out_layout) != layout or len(layout) != len(perm):
            return expr
        inner = [""] * len(perm)
        for i, p in enumerate(perm):  # y's layout: the letter at P[i] is layout[i]
            inner[p] = layout[i]
        inner = "".join(inner)
        if inner not in ("NCHW", "NHWC"):
            return expr
        pool = relax.op.nn.max_pool2d if expr.op.name.endswith("max_pool2d") else relax.op.nn.avg_pool2d
        pooled = pool(
            y,
            pool_size=[int(v) for v in a.pool_size],
            strides=[int(v) for v in a.strides],
            padding=[int(v) for v in a.padding],
            dilation=[int(v) for v in a.dilation],
            ceil_mode=bool(a.ceil_mode),
            count_include_pad=bool(a.count_include_pad),
            layout=inner,
            out_layout=inner,
        )
        return _permute(pooled, perm)

    def _reduction(self, expr, y, perm):
        from tvm import relax

        rank = len(perm)
        if expr.attrs.axis is None:
            return relax.Call(expr.op, [y], expr.attrs, expr.ty_args)  # over everything: order is irrelevant
        axes = sorted(int(a) % rank for a in expr.attrs.axis)
        op = getattr(relax.op, expr.op.name.removeprefix("relax."))
        reduced = op(y, axis=[perm[a] for a in axes], keepdims=bool(expr.attrs.keepdims))
        if expr.attrs.keepdims:
            return _permute(reduced, perm)
        kept = [perm[i] for i in range(rank) if i not in axes]  # y's axes left, in the order the result needs
        order = [sorted(kept).index(k) for k in kept]
        return reduced if order == sorted(order) else _permute(reduced, order)


def _permute(expr, perm):
    from tvm import relax

    return relax.op.permute_dims(expr, perm)


def _with_first_arg(call, arg):
    from tvm import relax

    return relax.Call(call.op, [arg, *call.args[1:]], call.attrs, call.ty_args)


def _same_shape(a, b) -> bool:
    sa, sb = getattr(a.ty, "shape", None), getattr(b.ty, "shape", None)
    return sa is not None and sb is not None and [str(d) for d in sa] == [str(d) for d in sb]


def _operand_before(expr, perm):
    """`_constant_before` for an operand computed from constants: as Relax ops, for FoldConstant."""
    from tvm import relax

    shape = [int(d) for d in expr.ty.shape]
    if not shape:
        return expr
    padded = [1] * (len(perm) - len(shape)) + shape
    if padded != shape:
        expr = relax.op.reshape(expr, padded)
    return relax.op.permute_dims(expr, [int(i) for i in np.argsort(perm)])


def _constant_before(const, perm):
    """The constant that, transposed by `perm`, broadcasts as `const` did: padded to the rank with leading 1s (as
    broadcasting does) and transposed by the inverse permutation. A scalar is left alone."""
    from tvm import relax

    value = const.value.numpy()
    if value.ndim == 0:
        return const
    padded = value.reshape((1,) * (len(perm) - value.ndim) + value.shape)
    return relax.const(np.ascontiguousarray(padded.transpose(np.argsort(perm))), str(value.dtype))
