"""Facts about a Relax function's bindings that graph rewrites ask before moving an op: how often each variable is
read, which variables are computed from constants alone (FoldConstant folds them at build time), what a variable
is bound to, an expression's static shape, and the integers of an op's tuple argument."""

from __future__ import annotations


def use_counts(func) -> dict:
    """How many bindings (and the function's result) read each variable."""
    from tvm import relax

    counts: dict = {}

    def read(expr):
        for var in relax.analysis.free_vars(expr):
            counts[var] = counts.get(var, 0) + 1

    for block in func.body.blocks:
        for binding in block.bindings:
            read(binding.value)
    read(func.body.body)
    return counts


def constant_vars(func) -> set:
    """Variables computed from constants alone (weights made by ConstantOfShape, a reshape of a weight)."""
    from tvm import relax

    constant = set()
    for block in func.body.blocks:
        for binding in block.bindings:
            if all(v in constant for v in relax.analysis.free_vars(binding.value)):
                constant.add(binding.var)
    return constant


def bound_value(var2val: dict, arg):
    """What `arg` is bound to (a variable read through the function's bindings), or `arg` itself."""
    from tvm import relax

    return var2val.get(arg, arg) if isinstance(arg, relax.Var) else arg


def static_shape(expr) -> list[int] | None:
    """The shape of a tensor expression when every dimension is known, else None."""
    shape = getattr(expr.ty, "shape", None)
    try:
        return [int(d) for d in shape] if shape is not None else None
    except (TypeError, ValueError):
        return None


def tuple_ints(expr) -> list[int] | None:
    """The integers of a Relax tuple of PrimValues (strided_slice's axes, begin, end, strides), else None."""
    from tvm import relax

    if not isinstance(expr, relax.Tuple):
        return None
    try:
        return [int(f.value) for f in expr.fields]
    except (AttributeError, TypeError, ValueError):
        return None


def out_dtype(call) -> str:
    """A conv call's result dtype: its out_dtype, else its input's."""
    dtype = call.attrs.out_dtype  # None, "" or "void" when the conv keeps its input's dtype
    return str(dtype) if dtype is not None and str(dtype) not in ("", "void") else str(call.args[0].ty.dtype)


def same_shape(a, b) -> bool:
    """Both shapes known and provably equal; symbolic dimensions compare by variable (a dim `n` equals `n`)."""
    sa, sb = shape_values(a), shape_values(b)
    if sa is None or sb is None or len(sa) != len(sb):
        return False
    from tvm.sym.analyzer import Analyzer

    analyzer = Analyzer()
    return all(analyzer.can_prove_equal(x, y) for x, y in zip(sa, sb))


def shape_values(expr) -> list | None:
    """The dimensions of a tensor expression (integers or symbolic expressions), or None when its shape is not a
    known list (a shape held in a variable, an unnormalized call)."""
    from tvm import relax

    ty = getattr(expr, "ty", None)  # TVM 0.27's struct info; a matched Call may not be normalized yet
    if not isinstance(ty, relax.TensorType) or ty.shape is None:
        return None
    values = getattr(ty.shape, "values", None)  # a ShapeExpr; a shape held in a variable has none
    return None if values is None else list(values)
