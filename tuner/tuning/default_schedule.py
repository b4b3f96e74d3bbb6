"""A cheap schedule for every CPU kernel that has no tuned record.

TVM has no default CPU schedule: an untuned kernel is a serial, unvectorised loop nest (one core of two, no SIMD).
Here each such kernel gets one schedule from MetaSchedule's own rules without search: `AutoInline` then
`ParallelizeVectorizeUnroll` (outer spatial loops fused and parallel, inner spatial loops vectorised, unrolling),
post-processed as the tuner would. No measurement, so it costs milliseconds per kernel; tuning then spends its
budget where the latency is. (GPU kernels get dlight's rules instead, in `tuner.build`.)
"""

from __future__ import annotations

import contextlib
import sys
import types


def _tiling():
    from tvm.s_tir import meta_schedule as ms

    return ms.schedule_rule.MultiLevelTiling(
        structure="SSRSRS",
        tile_binds=None,
        max_innermost_factor=64,
        vector_load_lens=None,
        reuse_read=None,
        reuse_write=ms.schedule_rule.ReuseType(req="may", levels=[1, 2], scope="global"),
    )


def _rules(tiled: bool = False):
    """TVM's llvm defaults for these two rules, built directly: `ScheduleRule.create("llvm")` imports every tensor
    intrinsic (~20 s) on AVX-512 VNNI hosts."""
    from tvm.s_tir import meta_schedule as ms

    return [
        *([_tiling()] if tiled else []),
        ms.schedule_rule.AutoInline(
            into_producer=False,
            into_consumer=True,
            inline_const_tensor=True,
            disallow_if_then_else=True,
            require_injective=True,
            require_ordered=True,
            disallow_op=["tirx.exp"],
        ),
        ms.schedule_rule.ParallelizeVectorizeUnroll(
            max_jobs_per_core=16, max_vectorize_extent=64, unroll_max_steps=[0, 16, 64, 512], unroll_explicit=True
        ),
    ]


def _postprocs():
    from tvm.s_tir import meta_schedule as ms

    # no RewriteLayout: it only acts on tiled schedules
    return [
        ms.postproc.DisallowDynamicLoop(),
        ms.postproc.RewriteParallelVectorizeUnroll(),
        ms.postproc.RewriteReductionBlock(),
    ]


@contextlib.contextmanager
def _without_tensor_intrinsics():
    """TuneContext imports every tensor intrinsic (~20 s on first use); these rules use none. Stand a module in for
    it while the context is made, unless the real one is loaded already."""
    name = "tvm.s_tir.tensor_intrin"
    if name in sys.modules:
        yield
        return
    sys.modules[name] = types.ModuleType(name)
    try:
        yield
    finally:
        del sys.modules[name]


def default_schedule(func, target, seed: int = 0, tiled: bool = False):
    """The PrimFunc scheduled by the cheap rules, or None when MetaSchedule cannot schedule it."""
    import tvm
    from tvm.s_tir import meta_schedule as ms

    space = ms.space_generator.PostOrderApply(sch_rules=_rules(tiled), postprocs=_postprocs(), mutator_probs={})
    with _without_tensor_intrinsics():
        ctx = ms.TuneContext(
            mod=tvm.IRModule({"main": func}),
            target=target,
            space_generator=space,
            task_name="default",
            num_threads=1,
            rand_state=seed,
        )
    try:
        schedules = ctx.generate_design_space()
    except Exception:
        return None
    for sch in schedules:
        if all(p.apply(sch) for p in ctx.space_generator.postprocs):
            return sch.mod["main"].with_attr("tirx.is_scheduled", True)
    return None


def schedule_untuned(mod, target_spec) -> tuple[object, list[str]]:
    """(module, names of kernels given the cheap schedule): every PrimFunc not scheduled by a tuning record.
    The input module is left as it is."""
    import tvm

    target = target_spec.tvm_target()
    updates = {}
    for gv, func in mod.functions.items():
        if not isinstance(func, tvm.tirx.PrimFunc) or (func.attrs is not None and "tirx.is_scheduled" in func.attrs):
            continue
        new = default_schedule(func, target)
        if new is not None:
            updates[gv] = new
    if not updates:
        return mod, []
    out = mod.clone()
    for gv, func in updates.items():
        out[gv] = func
    return out, sorted(gv.name_hint for gv in updates)
