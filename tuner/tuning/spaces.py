"""Design spaces: which MetaSchedule rules each task is searched with, and the tune contexts of a round."""

from __future__ import annotations

import logging
import warnings

# registered before any design space: TOPI's pooling rule names, and the Winograd transforms' rules (without them
# ApplyCustomRule drops the annotation and the transforms get the generic rules)
from tuner.schedule import custom_rules, winograd_transforms  # noqa: F401
from tuner.schedule.intrinsics import register as register_intrinsics


def half_precision(mod) -> bool:
    """Does any kernel compute in fp16/bf16 (where CUDA tensor cores apply)?"""
    from tuner.core.ir import kernel_scripts

    # TVM 0.27's Python PrimFunc exposes no buffer map: read the dtypes from the printed TIR
    return any('"float16"' in script or '"bfloat16"' in script for script in kernel_scripts(mod).values())


def design_space(target_spec, mod):
    """MetaSchedule's design space for a target. CUDA: thread binding, shared-memory tiling, cross-thread
    reduction; when the model computes in fp16/bf16, also the tensor-core (WMMA/MMA) tiling rules, which fall
    back to the plain CUDA rules for blocks they cannot tensorize. CPU: TVM's llvm rules."""
    from tvm.s_tir import meta_schedule as ms

    if target_spec.is_gpu and half_precision(mod):
        register_intrinsics("cuda")  # the WMMA/MMA intrinsics the rules name

        return ms.space_generator.PostOrderApply(
            sch_rules="cuda-tensorcore", postprocs="cuda-tensorcore", mutator_probs="cuda-tensorcore"
        )
    return "post-order-apply"


def bare_context(task, space, seed=None, search: str = "evolutionary"):
    """A TuneContext with no logger: MetaSchedule's per-task loggers reconfigure console logging on creation."""
    from tvm.s_tir import meta_schedule as ms

    register_intrinsics(task.target.kind.name)  # before TuneContext imports every target's (intrinsics.py)
    return ms.TuneContext(
        mod=task.dispatched[0],
        target=task.target,
        space_generator=space,
        search_strategy=search,
        task_name=task.task_name,
        num_threads=1,
        rand_state=-1 if seed is None else seed,
    ).clone()


def reduced_space(target_spec):
    """The target's rules without multi-level tiling: parallelise, vectorise, unroll, rfactor, inline and
    compute-location only. For fused kernels whose full design space TVM cannot generate."""
    from tvm.s_tir import meta_schedule as ms

    kind = "cuda" if target_spec.is_gpu else "llvm"
    rules = [r for r in ms.schedule_rule.ScheduleRule.create(kind) if "MultiLevelTiling" not in type(r).__name__]
    return ms.space_generator.PostOrderApply(sch_rules=rules, postprocs=kind, mutator_probs=kind)


def with_design_space(tunable, target_spec, fused_mod, template: bool = True):
    """Choose each task's design space before tuning. On CPU, first the default schedule's own space
    (`default_schedule.template_space`: the search starts at the default and mutates it), then TVM's llvm space.
    MetaSchedule's multi-level tiling rule fails on some fused kernels (reverse_compute_at of an epilogue fed by
    two reductions: our LayerNorm and attention groups), and one such task aborts tune_tasks for every task.
    Those get the reduced space; a task that fails that too keeps its default schedule, with the reason."""
    full, reduced = design_space(target_spec, fused_mod), reduced_space(target_spec)
    templates: dict[int, object] = {}
    keep = []
    for task, st in tunable:
        own = None if target_spec.is_gpu else _template(task, target_spec, templates, template)
        candidates = [(own, None)] if own is not None else []
        candidates += [(full, None), (reduced, "reduced design space (no multi-level tiling: {})")]
        for space, note in candidates:
            try:
                bare_context(task, space).generate_design_space()
            except Exception as err:
                first = next((ln for ln in str(err).splitlines() if "Error" in ln), type(err).__name__).strip()
                continue
            st.space = space
            if note:
                st.note = note.format(first[:80])
            keep.append((task, st))
            break
        else:
            st.skipped = f"MetaSchedule cannot build a design space for this kernel ({first[:100]}): default schedule"
    return keep


def _template(task, target_spec, cache: dict, template: bool = True):
    """The default schedule's space for this CPU task, one object per vector length and set of post-processors
    (tasks sharing a space are tuned in one batch of contexts). Without `template` (--space tvm), only for a
    spatial kernel whose vectors are not MetaSchedule's 64 lanes (there the two spaces differ only in that
    length), else None."""
    from tuner.core.target import vector_lanes
    from tuner.schedule.default_schedule import MAX_VECTOR_EXTENT, spatial_vector_extent, template_space
    from tuner.schedule.vector_split import may_need_split

    func, lanes = task.dispatched[0]["main"], vector_lanes(target_spec)
    extent = spatial_vector_extent(func, lanes)
    if not template and extent == MAX_VECTOR_EXTENT:
        return None
    key = (extent, may_need_split(func, lanes))  # the post-processors differ too (vector_split)
    if key not in cache:
        cache[key] = template_space(func, lanes)
    return cache[key]


def round_contexts(tunable, work_dir, console_level=None, **kwargs):
    """Tune contexts for a round, each task in the design space with_design_space chose. `console_level`:
    MetaSchedule's console log level as set before the first round (quiet_tvm_logs)."""
    from tvm.s_tir import meta_schedule as ms

    ms_logger = logging.getLogger("tvm.s_tir.meta_schedule")
    # MetaSchedule's logging config lists the logger's handlers by name and crashes on an unnamed one
    # (one added by the host program, e.g. pytest): detach those while it reconfigures
    foreign = [h for h in ms_logger.handlers if not h.get_name()]
    for h in foreign:
        ms_logger.removeHandler(h)
    for kind in {t.target.kind.name for t, _ in tunable}:
        register_intrinsics(kind)
    try:
        made = {}
        for space in {id(st.space): st.space for _, st in tunable}.values():
            # MetaSchedule's config gives its console handler the logger's level at that moment; the logger
            # itself is left at DEBUG by any earlier configuration (a previous round, the seeds, the previous
            # space of this round: a round over two spaces printed an INFO line into --json output)
            if console_level:
                ms_logger.setLevel(console_level)
            tasks = [t for t, st in tunable if st.space is space]
            c, w = ms.relax_integration.extracted_tasks_to_tune_contexts(tasks, work_dir, space=space, **kwargs)
            made.update({ctx.task_name: (ctx, weight) for ctx, weight in zip(c, w)})
        # in the order given: the deadline reads the task scheduler's task ids by it
        ordered = [made[t.task_name] for t, _ in tunable if t.task_name in made]
        contexts, weights = [c for c, _ in ordered], [w for _, w in ordered]
    finally:
        for h in foreign:
            ms_logger.addHandler(h)
    # Creating the contexts re-runs logging.config with the logger's current level (DEBUG after the first
    # time) for its stdout handler: put the console back, or round 2 prints INFO lines into --json output.
    _console_level(ms_logger, console_level)
    return contexts, weights


def _console_level(ms_logger, level) -> None:
    for handler in ms_logger.handlers:
        if type(handler) is logging.StreamHandler and level:
            handler.setLevel(level)


def quiet_tvm_logs(verbose: bool) -> None:
    level = logging.INFO if verbose else logging.WARNING
    for name in ("tvm.s_tir.meta_schedule", "tvm.meta_schedule"):
        logging.getLogger(name).setLevel(level)
    if not verbose:
        warnings.filterwarnings("ignore", module="tvm")
        warnings.filterwarnings("ignore", category=UserWarning)
