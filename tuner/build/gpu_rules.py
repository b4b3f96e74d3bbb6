"""GPU schedules for kernels without a tuned record: dlight's rules, one kernel at a time.

dlight's ApplyDefaultSchedule applies its rules to the whole module, and one kernel a rule raises on takes the
whole build down ("There are some consumers of the cache-write stage that are not properly inlined" on a conv
whose epilogue ends in the next op's Pad). Here each kernel tries the rules in order; a rule that raises or
declines passes the kernel on; after the last, a generic binding (each block's outer spatial loops fused over
blocks and threads, the rest serial in each thread) always applies. The build says which kernels fell back and
why."""

from __future__ import annotations

import re

RULES = ("matmul", "gemv", "reduction", "general_reduction", "fallback")
THREADS = 256  # threads per block of the generic binding


def _rule(name: str):
    from tvm.s_tir import dlight as dl

    return {
        "matmul": dl.gpu.Matmul,
        "gemv": dl.gpu.GEMV,
        "reduction": dl.gpu.Reduction,
        "general_reduction": dl.gpu.GeneralReduction,
        "fallback": dl.gpu.Fallback,
    }[name]()


def schedule_kernels(mod, target):
    """(scheduled module, {kernel: rule}, {kernel: why the rules failed}); `mod` itself is not changed."""
    from tvm import tirx

    out = mod.clone()
    used, fell_back = {}, {}
    with target:
        for gv, func in mod.functions_items():
            if not isinstance(func, tirx.PrimFunc) or _is_scheduled(func):
                continue
            name, errors = gv.name_hint, []
            for rule in RULES:
                try:
                    sch = _rule(rule).apply(func, target, False)
                except Exception as err:  # noqa: BLE001  (a rule's failure on one kernel is the next rule's turn)
                    errors.append(f"{rule}: {_last_line(err)}")
                    continue
                if sch is not None:
                    sch = sch[0] if isinstance(sch, list) else sch
                    too_big = _over_limits(sch.mod["main"], target)
                    if too_big:  # ptxas would refuse the whole library for this one kernel
                        errors.append(f"{rule}: {too_big}")
                        continue
                    out[gv] = sch.mod["main"].with_attr("tirx.is_scheduled", True)
                    used[name] = rule
                    if errors:  # an earlier rule failed on it: say why it got this one
                        fell_back[name] = "; ".join(errors)
                    break
            else:
                out[gv] = bind_generic(func).with_attr("tirx.is_scheduled", True)
                used[name] = "generic"
                fell_back[name] = "; ".join(errors) or "no rule applies"
    return out, used, fell_back


def bind_generic(func):
    """Every block inlined where it can be; each remaining block's leading spatial loops fused and bound to
    blockIdx.x/threadIdx.x, its other loops serial inside the thread. Always possible; never fast."""
    from tvm import s_tir

    sch = s_tir.Schedule(func)
    blocks = sch.get_child_blocks(sch.get_sblock("root")) if _has_root(sch) else []
    for block in reversed(blocks):
        for inline in (sch.compute_inline, sch.reverse_compute_inline):
            try:
                inline(block)
                break
            except Exception:  # noqa: BLE001, S112  (not inlinable: it keeps its own loops)
                continue
    for block in sch.get_child_blocks(sch.get_sblock("root")):
        loops = sch.get_loops(block)
        kinds = sch.get(block).iter_vars
        spatial = 0
        for loop in loops:  # the leading loops that only spatial block vars use
            if not _spatial_loop(sch, loop, kinds):
                break
            spatial += 1
        if spatial == 0:  # a reduction to a scalar: one thread computes it
            outer = sch.add_unit_loop(loops[0] if loops else block)
            sch.bind(outer, "blockIdx.x")
            sch.bind(sch.add_unit_loop(outer), "threadIdx.x")
            continue
        fused = sch.fuse(*loops[:spatial]) if spatial > 1 else loops[0]
        bx, tx = sch.split(fused, [None, THREADS])
        sch.bind(bx, "blockIdx.x")
        sch.bind(tx, "threadIdx.x")
    return sch.mod["main"]


def _spatial_loop(sch, loop, iter_vars) -> bool:
    """Whether the loop feeds only spatial (data-parallel) block vars: safe to split over threads."""
    from tvm import tirx

    var = sch.get(loop).loop_var
    block_realize_uses = [iv for iv in iter_vars if iv.iter_type != tirx.IterVar.DataPar]
    # a reduction block var bound to an expression of this loop makes it a reduction loop
    return not any(_uses(var, iv) for iv in block_realize_uses)


def _uses(var, iv) -> bool:
    return var.name in str(iv.var.name)  # block vars are named after their loops by TVM's lowering


def _has_root(sch) -> bool:
    try:
        sch.get_sblock("root")
        return True
    except Exception:  # noqa: BLE001
        return False


# after compaction a per-block buffer prints as T.alloc_shared(...), one still in a block as
# T.sblock_alloc_buffer(..., scope="shared"); either may carry a dtype and strides
_ALLOC = re.compile(
    r'T\.(alloc_shared|sblock_alloc_buffer)\(\(([^()]*)\),(?: "(\w+)",)?(?: strides=\(([^()]*)\),)?([^\n]*)'
)


def _over_limits(func, target) -> str | None:
    """Why a scheduled kernel cannot launch on the target (its shared memory per block over the limit), or
    None. dlight's general-reduction rule staged a 16x32x32 conv output of one kernel in shared memory (64 KB of
    48): ptxas then refuses the whole library. The per-block buffers are what TVM's lowering compacts them to,
    read from the printed kernel (TVM 0.27's wheel has no TIR visitor for Python, as core/ir.py notes)."""
    import tvm

    t = tvm.s_tir.transform
    passes = [t.LowerInitBlock(), t.PlanAndUpdateBufferAllocationLocation(), t.ConvertBlocksToOpaque()]
    try:
        lowered = tvm.transform.Sequential([*passes, t.CompactBufferAllocation()])(tvm.IRModule({"main": func}))
    except Exception:  # noqa: BLE001  (cannot tell here: nvcc will)
        return None
    lowered = lowered["main"]
    limit = int(target.attrs.get("max_shared_memory_per_block", 49152))
    used = 0
    text = re.sub(r"T\.int(?:64|32)\((\d+)\)", r"\1", lowered.script())  # T.int64(16) -> 16
    for kind, shape, dtype, strides, rest in _ALLOC.findall(text):
        if kind == "sblock_alloc_buffer" and 'scope="shared' not in rest:
            continue
        dims, steps = _ints(shape), _ints(strides)
        elements = dims[0] * steps[0] if steps and dims else _product(dims)
        used += elements * max(int(re.sub(r"\D", "", dtype or "float32") or 32), 8) // 8
    return f"{used} bytes of shared memory per block, over the {limit} allowed" if used > limit else None


def _ints(text: str) -> list[int]:
    return [int(x) for x in re.findall(r"\d+", text or "")]


def _product(values) -> int:
    n = 1
    for v in values:
        n *= v
    return n


def _is_scheduled(func) -> bool:
    attrs = func.attrs or {}
    return bool(attrs.get("tirx.is_scheduled", False) or attrs.get("tir.is_scheduled", False))


def _last_line(err: Exception) -> str:
    text = str(err).strip()
    return (text.splitlines()[-1] if text else type(err).__name__)[:200]
