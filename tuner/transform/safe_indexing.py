"""Lookups that cannot read outside their table: every `take` in clip mode.

TVM's ONNX importer emits `take(table, indices)` in "fast" mode, which reads whatever address an out-of-range
index names (TOPI warns: "Fast mode segfaults when there are out-of-bounds indices"). An index comes from the
user (a token id, a token type) or from arithmetic on it, so a package must never trust it. Clip mode clamps each
index into [0, rows - 1]: one min/max per looked-up row, where the row copy is the work. Negative indices were
already wrapped by the importer, as ONNX defines them. The package boundary refuses out-of-range inputs with an
error first (`frontend/index_ranges.py`); the clamp is the guarantee for indices computed inside the graph."""

from __future__ import annotations


def ClampIndices():  # noqa: N802  (a pass, named as TVM names its passes)
    import tvm

    return tvm.transform.module_pass(lambda mod, _ctx: clamp_indices(mod), opt_level=0, name="ClampIndices")


def clamp_indices(mod):
    from tvm import relax
    from tvm.relax.dpl import is_op, wildcard

    from tuner.core.ir import rewrite_relax_functions

    pattern = is_op("relax.take")(wildcard(), wildcard())

    def rewrite(expr, _matches):
        if str(expr.attrs.mode) != "fast":
            return expr
        axis = expr.attrs.axis
        return relax.op.take(expr.args[0], expr.args[1], None if axis is None else int(axis), mode="clip")

    return rewrite_relax_functions(mod, pattern, rewrite)
