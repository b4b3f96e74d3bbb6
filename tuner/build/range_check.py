"""The range check of a ranged build: the first thing its main does, in the library itself."""

from __future__ import annotations

_CHECK = "check_shape_ranges"  # the kernel main calls first in a ranged build


def with_range_check(mod, bounds: dict):
    """The module with main first calling a kernel that asserts every symbolic dimension inside its range
    (`bounds`: {name: (lo, hi)}). Memory planning sizes each intermediate for the top of the ranges
    (`tir_var_upper_bound`): a size above it would write past those buffers. With the check, any caller of the
    library (the C++ example, a VM loaded by hand) gets an error, not a write out of bounds. Added after
    scheduling, where no pass sees it. (Relax's assert_op calls a function that the runtime alone lacks; a TIR
    assert compiles into the library.)"""
    import tvm
    from tvm import relax
    from tvm.script import tirx as T

    main = mod["main"]
    free = {v.name: v for p in main.params for v in _shape_vars(p)}
    checked = sorted(n for n in bounds if n in free)
    if not checked:
        return mod
    params = ", ".join(f"d{k}: T.int64" for k in range(len(checked)))
    asserts = "".join(
        f"    assert {bounds[n][0]} <= d{k} and d{k} <= {bounds[n][1]}, "
        f'"dimension {n} is outside the package\'s range {bounds[n][0]}..{bounds[n][1]}"\n'
        for k, n in enumerate(checked)
    )
    attrs = f'{{"global_symbol": "{_CHECK}", "tirx.is_scheduled": True}}'
    text = f"@T.prim_func\ndef main({params}):\n    T.func_attr({attrs})\n{asserts}"
    builder = relax.BlockBuilder(mod)
    check = builder.add_func(tvm.script.from_source(text, extra_vars={"T": T}), _CHECK)
    mod = builder.get()
    call = relax.Call(check, [relax.prim_value(free[n]) for n in checked])
    binding = relax.VarBinding(relax.Var("shapes_checked", relax.TupleType([])), call)
    body = relax.SeqExpr([relax.BindingBlock([binding]), *main.body.blocks], main.body.body)
    mod["main"] = relax.Function(main.params, body, main.ret_ty, False, main.attrs)
    return mod


def _shape_vars(param):
    import tvm

    shape = getattr(param.ty, "shape", None)
    values = getattr(shape, "values", None) or []
    return [d for d in values if isinstance(d, tvm.tirx.Var)]
