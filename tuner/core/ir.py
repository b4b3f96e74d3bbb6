"""IR helpers every stage shares: tensor bytes, FLOPs, PrimFuncs, kernel launch sites, memory footprint, and the
printed TIR of each kernel.

Fusion strategies, the plan, compare and build import from here (never from each other), which keeps the
import graph one-way. TVM 0.27's wheel registers no TIR visitor for Python (the only post-order visit is
`relax.analysis.post_order_visit`), so facts about a kernel's loops come from its printed TVMScript:
`kernel_scripts` prints each PrimFunc once and callers read from that.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

# TVM's OpPatternKind (include/tvm/relax/op_attr_types.h)
# 4 is kOutEWiseFusable: conv/matmul/pool-like "anchors" that can absorb element-wise consumers
PATTERN_KINDS = {0: "elemwise", 1: "broadcast", 2: "injective", 3: "reduce", 4: "anchor", 7: "tuple", 8: "opaque"}


@dataclass
class KernelSite:
    """One kernel launch in `main`: the PrimFunc called and the Relax binding it produces."""

    kernel: str
    var: str


def nbytes(ty) -> int:
    """Bytes of a Relax tensor (or tuple) type with a static shape; 0 when the shape is symbolic."""
    import numpy as np
    from tvm import relax

    if isinstance(ty, relax.TensorType) and ty.shape is not None:
        n = 1
        try:
            for d in ty.shape.values:
                n *= int(d)
        except (TypeError, ValueError):
            return 0
        return n * np.dtype(str(ty.dtype)).itemsize
    if isinstance(ty, relax.TupleType):
        return sum(nbytes(f) for f in ty.fields)
    return 0


def op_pattern(func) -> str:
    """The op-pattern kind AnnotateTIROpPattern gave a PrimFunc, as a word."""
    if func is None or func.attrs is None or "op_pattern" not in func.attrs:
        return "opaque"
    return PATTERN_KINDS.get(int(func.attrs["op_pattern"]), str(int(func.attrs["op_pattern"])))


def flops(func) -> float:
    """FLOPs of one PrimFunc (or an IRModule of one), by TVM's estimator; 0 when it cannot tell."""
    import tvm

    if func is None:
        return 0.0
    mod = func if isinstance(func, tvm.IRModule) else tvm.IRModule({"main": func})
    try:
        return float(tvm.s_tir.analysis.estimate_tir_flops(mod))
    except Exception:
        return 0.0


def primfuncs(mod) -> dict:
    """{name: PrimFunc} of a module."""
    import tvm

    return {gv.name_hint: f for gv, f in mod.functions.items() if isinstance(f, tvm.tirx.PrimFunc)}


def is_scheduled(func) -> bool:
    """A kernel that carries its schedule: a tuning record applied to it, or written by hand (a recurrent
    sequence, a range check). In a module straight from `lower`, only the hand-written ones."""
    return func.attrs is not None and "tirx.is_scheduled" in func.attrs


PACKED = "_prepacked"  # the suffix TVM gives a kernel whose weights it packs at build time

_PREPROC_TRUE = re.compile(r'("meta_schedule\.layout_rewrite_preproc"): (?:1|T\.bool\(True\))\b')


def same_program(a, b) -> bool:
    """Are two scheduled PrimFuncs the same program? Structurally equal, or printed alike once the layout-rewrite
    mark is read as the flag it is: a schedule replayed from a database record carries it as 1, the same
    schedule made in memory as True."""
    import tvm_ffi

    if tvm_ffi.structural_equal(a, b):
        return True
    return _PREPROC_TRUE.sub(r"\1: True", a.script()) == _PREPROC_TRUE.sub(r"\1: True", b.script())


@functools.lru_cache(maxsize=4096)
def kernel_script(func) -> str:
    """A PrimFunc's printed TIR, printed once per PrimFunc object (PrimFuncs are immutable; see the module
    docstring for why we read scripts at all)."""
    return func.script()


def kernel_scripts(mod) -> dict[str, str]:
    """{name: printed TIR} of every PrimFunc in the module."""
    return {name: kernel_script(f) for name, f in primfuncs(mod).items()}


_BUFFER = re.compile(r"T\.Buffer\(\((.*?)\),\s*\"")
_DIM = re.compile(r"T\.int(?:32|64)\((\d+)\)|(\d+)")


def buffer_shapes(script: str) -> list[list[int] | None]:
    """Shapes of a kernel's parameters, in order (outputs last), read from its printed signature; None for a
    shape with a symbolic dimension."""
    signature = script[script.index("def ") : script.index("):")]
    shapes = []
    for dims in _BUFFER.findall(signature):
        shape = []
        for token in (d.strip() for d in dims.split(",")):
            match = _DIM.fullmatch(token) if token else None
            if token and match is None:
                shape = None
                break
            if match:
                shape.append(int(match.group(1) or match.group(2)))
        shapes.append(shape)
    return shapes


def kernel_sites(mod) -> list[KernelSite]:
    """Kernel launches per inference: `call_tir` sites in main, in execution order.

    Reshapes that the VM turns into views (RewriteDataflowReshape) launch nothing and are not counted.
    """
    import tvm
    from tvm import relax

    mod = relax.transform.RewriteDataflowReshape()(mod)
    call_tir = tvm.ir.Op.get("relax.call_tir")
    sites: list[KernelSite] = []
    for block in mod["main"].body.blocks:
        for binding in block.bindings:
            value = binding.value
            if isinstance(value, relax.Call) and value.op == call_tir:
                sites.append(KernelSite(value.args[0].name_hint, binding.var.name))
    return sites


def product(values) -> int:
    """Product of the values; 0 for none."""
    out = 0
    for v in values:
        out = v if out == 0 else out * v
    return out


def memory_footprint(fused_mod, target) -> dict:
    """What one inference holds on the device: weights (distinct constants) and planned intermediate storage.
    Inputs and outputs come on top. Recorded in packages so an out-of-memory error can say what was needed."""
    import tvm
    from tvm import relax

    constants = set()  # ObjectRefs hash by identity: a constant used twice counts once

    def visit(expr):
        if isinstance(expr, tvm.ir.expr.Constant):
            constants.add(expr)

    relax.analysis.post_order_visit(fused_mod["main"], visit)
    planned, _ = storage(fused_mod, target)
    return {"weights_bytes": sum(nbytes(c.ty) for c in constants), "intermediate_bytes": planned}


def storage(fused_mod, target) -> tuple[int, int]:
    """(planned, unplanned) bytes of intermediate storage: StaticPlanBlockMemory's `alloc_storage` sizes,
    and the sum of every tensor it placed (what a planner-less runtime would hold)."""
    import tvm
    from tvm import relax

    t = relax.transform
    seq = tvm.transform.Sequential(
        [
            t.RewriteDataflowReshape(),
            t.ToNonDataflow(),
            t.RemovePurityChecking(),
            t.CallTIRRewrite(),
            t.StaticPlanBlockMemory(),
        ]
    )
    with target, tvm.transform.PassContext(opt_level=3):
        planned_mod = seq(fused_mod)
    storage_op = tvm.ir.Op.get("relax.memory.alloc_storage")
    tensor_op = tvm.ir.Op.get("relax.memory.alloc_tensor")
    planned = unplanned = 0
    upper = (planned_mod["main"].attrs or {}).get("tir_var_upper_bound") or {}
    for block in planned_mod["main"].body.blocks:
        for b in block.bindings:
            v = b.value
            if isinstance(v, relax.Call) and v.op == storage_op and isinstance(v.args[0], relax.ShapeExpr):
                planned += product(_at_most(x, upper) for x in v.args[0].values) or 0
            elif isinstance(v, relax.Call) and v.op == tensor_op:
                unplanned += nbytes(b.var.ty)
    return planned, unplanned


def _at_most(size, upper: dict) -> int:
    """A storage size in bytes; a symbolic one (a ranged build's, the planner could not bound) at the top of the
    ranges, 0 when it depends on a size with no known top."""
    from tvm.sym.analyzer import Analyzer

    try:
        return int(size)
    except TypeError:
        analyzer = Analyzer()
        for var in free_vars(size):
            if var.name in upper:
                analyzer.bind(var, int(upper[var.name]))
        value = analyzer.simplify(size)
        return int(value) if hasattr(value, "value") else 0


def free_vars(expr) -> list:
    """The variables of a size expression (symbolic dimensions)."""
    import tvm
    from tvm.tirx.analysis import undefined_vars

    return [v for v in undefined_vars(expr) if isinstance(v, tvm.tirx.Var)]


def rewrite_relax_functions(mod, pattern, rewrite):
    """`relax.dpl.rewrite_call(pattern, rewrite, f)` on every Relax function of `mod`; the same module when nothing
    matched (a pass that changes nothing stays a no-op)."""
    from tvm import relax
    from tvm.relax.dpl import rewrite_call

    out = mod
    for gv, func in mod.functions.items():
        if isinstance(func, relax.Function):
            new = rewrite_call(pattern, rewrite, func)
            if not new.same_as(func):
                out = out.clone() if out is mod else out
                out[gv] = new
    return out


def rewrite_counting(mod, rewrite, attr: str):
    """`rewrite(func) -> (new function or None, {kind: count})` on every Relax function of `mod`, the counts summed
    into the module attribute `attr` (what the pass did, for the compile output, the manifest and the plan); the
    same module when nothing was rewritten."""
    from tvm import relax

    out, totals = mod, {}
    for gv, func in mod.functions.items():
        if not isinstance(func, relax.Function):
            continue
        new, counts = rewrite(func)
        if new is None:
            continue
        out = out.clone() if out is mod else out
        out[gv] = new
        for kind, n in counts.items():
            totals[kind] = totals.get(kind, 0) + n
    return out if not totals else out.with_attr(attr, totals)


def counted(mod, attr: str) -> dict[str, int]:
    """The counts `rewrite_counting` kept in the module attribute `attr`; {} when the pass rewrote nothing."""
    if mod.attrs is None or attr not in mod.attrs:
        return {}
    return {str(k): int(v) for k, v in mod.attrs[attr].items()}


def region_buffer_name(region) -> str:
    """The name of a block read's buffer (its parameter's name for a kernel argument): `source` in TVM 0.27's
    TensorRegion, `buffer` in older TIR."""
    target = getattr(region, "source", None)
    if target is None:
        target = getattr(region, "buffer", None)
    name = getattr(target, "name", None)
    return str(name if name is not None else target)


def view_source(value):
    """The tensor a `vm.builtin.reshape` view relabels (transform/pointwise_matmul.py writes them), else None."""
    from tvm import relax

    if not (isinstance(value, relax.Call) and getattr(value.op, "name", "") == "relax.call_pure_packed"):
        return None
    func, *args = value.args
    return args[0] if getattr(func, "global_symbol", "") == "vm.builtin.reshape" and args else None
