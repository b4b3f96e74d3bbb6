"""A cheap schedule for every CPU kernel that has no tuned record.

TVM has no default CPU schedule: an untuned kernel is a serial, unvectorised loop nest (one core of two, no SIMD).
Here each gets one schedule from MetaSchedule's llvm rules without search (`AutoInline`, multi-level tiling with
`heuristic_tiles`, `ParallelizeVectorizeUnroll`), post-processed as the tuner would: milliseconds per kernel, no
measurement; tuning then spends its budget where the latency is. (GPU kernels get
dlight's rules, in `tuner.build.executable`.)
"""

from __future__ import annotations

import contextlib
import re

from tuner.core.ir import buffer_shapes, kernel_script
from tuner.core.target import vector_lanes
from tuner.schedule import vector_split
from tuner.schedule.block_facts import MAX_VECTOR_EXTENT, shared_axes, whole_vectors_up_to
from tuner.schedule.column_reductions import column_schedule
from tuner.schedule.data_movement import movement_schedule
from tuner.schedule.inner_reductions import inner_reduction_schedule
from tuner.schedule.intrinsics import register as register_intrinsics
from tuner.schedule.padding import inline_channelwise_padding
from tuner.schedule.recipes import RECIPE, TileRecipe
from tuner.schedule.row_kernels import row_schedule
from tuner.schedule.tiles import heuristic_tiles, registers_for

_REDUCTION = re.compile(r'T\.axis\.reduce|T\.axis\.remap\("S*R|T\.init\(\)')


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


def _rules(vector_extent: int = MAX_VECTOR_EXTENT, recipe: TileRecipe = RECIPE):
    """TVM's llvm defaults for these rules, built directly: `ScheduleRule.create("llvm")` imports every tensor
    intrinsic (~20 s) on AVX-512 VNNI hosts. In TVM's order, inlining first: see `TileRecipe.fuse_epilogue`.
    The pooling rules of `custom_rules` first, as in TVM's list (`TileRecipe.vector_pools`)."""
    from tvm.s_tir import meta_schedule as ms

    from tuner.schedule import custom_rules, winograd_transforms  # noqa: F401  (the pooling and Winograd rules, registered)

    order = [_auto_inline(), _tiling()] if recipe.fuse_epilogue else [_tiling(), _auto_inline()]
    custom = [ms.schedule_rule.ApplyCustomRule()] if recipe.vector_pools else []
    return [*custom, *order, parallelize_vectorize_unroll(vector_extent)]


def _auto_inline():
    """MetaSchedule's llvm AutoInline."""
    from tvm.s_tir import meta_schedule as ms

    return ms.schedule_rule.AutoInline(
        into_producer=False,
        into_consumer=True,
        inline_const_tensor=True,
        disallow_if_then_else=True,
        require_injective=True,
        require_ordered=True,
        disallow_op=["tirx.exp"],
    )


def parallelize_vectorize_unroll(vector_extent: int = MAX_VECTOR_EXTENT):
    """MetaSchedule's llvm rule for the loops outside any tiling, with the vector length as a parameter."""
    from tvm.s_tir import meta_schedule as ms

    return ms.schedule_rule.ParallelizeVectorizeUnroll(
        max_jobs_per_core=16,
        max_vectorize_extent=vector_extent,
        unroll_max_steps=[0, 16, 64, 512],
        unroll_explicit=True,
    )


def spatial_vector_extent(func, lanes: int) -> int:
    """The vector length for a kernel of spatial loops only (element-wise, broadcast, transpose, layout change):
    the output's innermost axis when it is at most 64 long, else its largest divisor up to 64 that is a whole
    number of vectors. MetaSchedule fuses every spatial loop and splits 64 off the end: across a 24-channel
    boundary each lane gets its own index arithmetic and a transpose becomes gathers (PP-OCRv4's upsampling
    epilogue, NHWC, 24 channels: 0.92 ms; vectors of 24: 0.047 ms, each default schedule timed alone). Kernels
    with a reduction, or a short or symbolic innermost axis, keep 64."""
    script = kernel_script(func)
    shapes = buffer_shapes(script)
    if _REDUCTION.search(script) or not shapes or not shapes[-1]:
        return MAX_VECTOR_EXTENT
    inner = shapes[-1][-1]
    if inner < lanes // 2:
        return MAX_VECTOR_EXTENT
    if inner <= MAX_VECTOR_EXTENT:
        return inner
    return whole_vectors_up_to(inner, lanes, MAX_VECTOR_EXTENT) or MAX_VECTOR_EXTENT


def _epilogue_depth(sketch) -> int:
    """How many loops enclose the block the sketch placed at a tile (multi-level tiling's ReverseComputeAt),
    0 when it placed none."""
    depth = 0
    for inst in (i for i in sketch.trace.insts if i.kind.name == "ReverseComputeAt"):
        with contextlib.suppress(Exception):  # a block inlined afterwards stays at no tile
            depth = max(depth, len(sketch.get_loops(inst.inputs[0])))
    return depth


def _postprocs(lanes: int, recipe: TileRecipe = RECIPE, split: bool = True):
    from tvm.s_tir import meta_schedule as ms

    # RewriteLayout packs layout-free weights into the tiled access order; `lowering.pack_weights` folds it
    split_vectors = [vector_split.postproc(lanes)] if split and recipe.split_wide_vectors else []
    return [
        ms.postproc.DisallowDynamicLoop(),
        ms.postproc.RewriteParallelVectorizeUnroll(),
        *split_vectors,  # right after the vectors are made (vector_split.postproc)
        ms.postproc.RewriteReductionBlock(),
        ms.postproc.RewriteLayout(),
    ]


def _retile(sch, original, lanes: int, recipe: TileRecipe = RECIPE, cores: int = 1):
    """The sampled schedule with every tiling decision replaced by `heuristic_tiles` (per block), and the unroll
    depth by `recipe.unroll`."""
    from tvm.s_tir import Schedule

    trace = _unroll(drawn := sch.trace, recipe.unroll)
    tiles = [inst for inst in trace.insts if inst.kind.name == "SamplePerfectTile"]
    if not tiles and trace.same_as(drawn):  # nothing to replace
        return sch
    groups, current = [], []
    for inst in tiles:  # a block's tiles are contiguous: spatial (4 factors) then reduction (2)
        n = len(trace.decisions[inst])
        if current and n == 4 and len(trace.decisions[current[-1]]) == 2:
            groups.append(current)
            current = []
        current.append(inst)
    groups.append(current)
    unscheduled = Schedule(original)  # the blocks as the tiling rule saw them, for `_shared_axes`
    for group in filter(None, groups):  # none when only the unroll depth changes (a pool's custom rule)
        decisions = [[int(x) for x in trace.decisions[i]] for i in group]
        shares = _shared_axes(trace, group[0], unscheduled, decisions)
        new = heuristic_tiles(decisions, lanes, registers_for(lanes), recipe, cores, shares)
        for inst, dec in zip(group, new):
            trace = trace.with_decision(inst, [int(x) for x in dec], remove_postproc=True)
    out = Schedule(original)  # as MetaSchedule makes them: no per-step verification
    trace.apply_to_schedule(out, remove_postproc=True)
    return out


def _shared_axes(trace, tile, unscheduled, decisions) -> list[bool] | None:
    """`block_facts.shared_axes` of the block whose loops the SamplePerfectTile `tile` splits, one per tiled loop,
    read in `unscheduled` (a Schedule of the function before the trace); None when the trace does not name the
    block (`GetSBlock` -> `GetLoops`) or its loops are not its iterators."""

    def producer(rv):
        return next((i for i in trace.insts if any(o.same_as(rv) for o in i.outputs)), None)

    get_loops = producer(tile.inputs[0])
    get_block = producer(get_loops.inputs[0]) if get_loops is not None and get_loops.kind.name == "GetLoops" else None
    if get_block is None or get_block.kind.name != "GetSBlock":
        return None
    try:
        rv = unscheduled.get_sblock(str(get_block.attrs[0]), func_name=str(get_block.attrs[1]))
        block = unscheduled.get(rv)
    except Exception:  # a block made by an earlier step of the trace: not in the unscheduled function
        return None
    kinds = [4 if int(it.iter_type) == 0 else 2 for it in block.iter_vars]
    if kinds != [len(d) for d in decisions]:
        return None
    return shared_axes(block)


def _unroll(trace, steps: int | None):
    """The trace with each unroll draw (ParallelizeVectorizeUnroll's `SampleCategorical` over its max steps) set to
    `steps`; None keeps the draws."""
    if steps is None:
        return trace
    for inst in [i for i in trace.insts if i.kind.name == "SampleCategorical"]:
        choices = [int(c) for c in inst.attrs[0]]
        if steps in choices:
            trace = trace.with_decision(inst, choices.index(steps), remove_postproc=True)
    return trace


def template_space(func, lanes: int, recipe: TileRecipe = RECIPE, mutator_probs="llvm"):
    """The design space whose sketches the default schedule is a point of: the same rules in the same order
    (`_rules`, the vector length `heuristic_schedule` picks for `func`) and post-processing, with TVM's llvm
    mutators. Tuning in it starts at the default schedule (the seed record, tuning/seed.py) and mutates its tile
    sizes, unroll depth and parallel extent; TVM's llvm space orders inlining and tiling the other way for an
    epilogue, so a conv's default was no point of it and the search could only find it again by chance."""
    from tvm.s_tir import meta_schedule as ms

    extent = spatial_vector_extent(func, lanes) if recipe.fit_spatial_vectors else MAX_VECTOR_EXTENT
    postprocs = _postprocs(lanes, recipe, vector_split.may_need_split(func, lanes))
    return ms.space_generator.PostOrderApply(
        sch_rules=_rules(extent, recipe), postprocs=postprocs, mutator_probs=mutator_probs
    )


def heuristic_schedule(func, target, lanes: int = 8, seed: int = 0, recipe: TileRecipe = RECIPE):
    """The PrimFunc's schedule without search (a `tvm.s_tir.Schedule`), or None when MetaSchedule cannot schedule
    it: MetaSchedule's llvm design space (multi-level tiling for anchors, inlining, parallel/vectorise/unroll)
    with its tile sizes set by `heuristic_tiles` instead of drawn at random, post-processed as the tuner would; a
    normalisation over the innermost axis (softmax, layer norm) row by row instead (`row_kernels`), a reduction over
    outer axes with the kept innermost axis in vectors (`column_reductions`), one over the innermost axes with
    vectors of partial results (`inner_reductions`), a kernel that only rearranges its input as a copy or a tiled
    transpose (`data_movement`)."""
    import tvm
    from tvm.s_tir import meta_schedule as ms

    space = template_space(func, lanes, recipe, mutator_probs={})  # no search here
    register_intrinsics("llvm")  # what TuneContext would import: the CPU's only (tuning/intrinsics.py)
    ctx = ms.TuneContext(
        mod=tvm.IRModule({"main": func}),
        target=target,
        space_generator=space,
        task_name="default",
        num_threads=1,
        rand_state=seed,
    )
    cores = int(target.attrs.get("num-cores", 1))
    for use, own_schedule in (
        (recipe.row_kernels, lambda: row_schedule(func, lanes)),
        (recipe.column_reductions, lambda: column_schedule(func, lanes, cores)),
        (recipe.inner_reductions, lambda: inner_reduction_schedule(func, lanes)),
        (recipe.data_movement, lambda: movement_schedule(func, lanes)),
    ):
        if use and (sch := own_schedule()) is not None:
            sch.enter_postproc()
            if all(p.apply(sch) for p in ctx.space_generator.postprocs):
                return sch
    try:
        schedules = ctx.generate_design_space()
    except Exception:
        return None
    if recipe.fuse_epilogue:
        schedules = sorted(schedules, key=lambda sk: -_epilogue_depth(sk))
    for sketch in schedules:
        try:
            sch = _retile(sketch, tvm.IRModule({"main": func}), lanes, recipe, cores)
            if recipe.channelwise_padding_inline:
                inline_channelwise_padding(sch)
            sch.enter_postproc()  # as MetaSchedule does: a replay of the record can then strip and redo them
            if all(p.apply(sch) for p in ctx.space_generator.postprocs):
                return sch
        except Exception:  # this sketch does not take the heuristic tiles: try the next
            continue
    return None


def default_schedule(func, target, lanes: int = 8, seed: int = 0, recipe: TileRecipe = RECIPE):
    """The scheduled PrimFunc of `heuristic_schedule`, marked scheduled, or None."""
    sch = heuristic_schedule(func, target, lanes, seed, recipe)
    return None if sch is None else sch.mod["main"].with_attr("tirx.is_scheduled", True)


def schedule_untuned(mod, target_spec, skip=frozenset(), recipe: TileRecipe = RECIPE) -> tuple[object, list[str]]:
    """(module, names of kernels given the cheap schedule): every PrimFunc not scheduled by a tuning record.
    The input module is left as it is."""
    import tvm

    target = target_spec.tvm_target()
    updates = {}
    for gv, func in mod.functions.items():
        if not isinstance(func, tvm.tirx.PrimFunc) or (func.attrs is not None and "tirx.is_scheduled" in func.attrs):
            continue
        if gv.name_hint in skip:
            continue
        new = default_schedule(func, target, vector_lanes(target_spec), recipe=recipe)
        if new is not None:
            updates[gv] = new
    if not updates:
        return mod, []
    out = mod.clone()
    for gv, func in updates.items():
        out[gv] = func
    return out, sorted(gv.name_hint for gv in updates)
