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
from tuner.schedule.column_reductions import column_schedule
from tuner.schedule.data_movement import movement_schedule
from tuner.schedule.inner_reductions import inner_reduction_schedule
from tuner.schedule.intrinsics import register as register_intrinsics
from tuner.schedule.padding import inline_channelwise_padding
from tuner.schedule.recipes import RECIPE, TileRecipe
from tuner.schedule.row_kernels import row_schedule

MAX_VECTOR_EXTENT = 64  # MetaSchedule's llvm default for ParallelizeVectorizeUnroll
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
    return next((w for w in range(MAX_VECTOR_EXTENT, 0, -lanes) if inner % w == 0), MAX_VECTOR_EXTENT)


def _epilogue_depth(sketch) -> int:
    """How many loops enclose the block the sketch placed at a tile (multi-level tiling's ReverseComputeAt),
    0 when it placed none."""
    depth = 0
    for inst in (i for i in sketch.trace.insts if i.kind.name == "ReverseComputeAt"):
        with contextlib.suppress(Exception):  # a block inlined afterwards stays at no tile
            depth = max(depth, len(sketch.get_loops(inst.inputs[0])))
    return depth


def _postprocs():
    from tvm.s_tir import meta_schedule as ms

    # RewriteLayout packs layout-free weights into the tiled access order; `lowering.pack_weights` folds it
    return [
        ms.postproc.DisallowDynamicLoop(),
        ms.postproc.RewriteParallelVectorizeUnroll(),
        ms.postproc.RewriteReductionBlock(),
        ms.postproc.RewriteLayout(),
    ]


def _divisor_at_most(n: int, cap: int) -> int:
    return max(d for d in range(1, min(n, cap) + 1) if n % d == 0)


def _pow2_divisor_at_most(n: int, cap: int) -> int:
    return max(d for d in (1, 2, 4, 8, 16) if d <= cap and n % d == 0)


def heuristic_tiles(
    decisions: list[list[int]], lanes: int, registers: int = 32, recipe: TileRecipe = RECIPE, cores: int = 1
) -> list[list[int]]:
    """Tile sizes for one block's SSRSRS tiling (spatial axes: 4 factors, reduction axes: 2, in loop order),
    replacing random draws with the usual CPU recipe: the last spatial axis (contiguous in memory) gets a vector
    of `lanes` innermost and up to `max_vectors` of them side by side; the axes before it a register block of
    rows (the second-last first, then the one before when a small extent leaves room), as many as the vector
    registers hold; everything else of the spatial extents goes to the outermost loops, which are fused and
    parallel (with `weights_outer`, the row blocks one level inside); reductions run whole in the outer loop.
    Rows whose inputs alias in L1 are capped (`TileRecipe.aliasing_rows`); a row of the input is taken to be the
    innermost reduction's extent of float32 (the channels of an NHWC conv, K of a matmul), and for a conv a row
    of the output as well: ResNet-50's 256 -> 1024 convs with their residual, 7 rows, 0.973-0.981 of 14 in the
    model (a 128 x 1024 matmul's 4 x 4 tile under the same cap measured 1.01-1.02: matmuls keep theirs)."""
    spatial = [k for k, d in enumerate(decisions) if len(d) == 4]
    extents = [_product(d) for d in decisions]
    inner, block = {}, {}
    if spatial:
        last = _vector_axis(spatial, extents, lanes) if recipe.vector_axis_divisible else spatial[-1]
        inner[last] = (
            _vector_width(extents[last], lanes) if recipe.pow2_width else _divisor_at_most(extents[last], lanes)
        )
        if len(spatial) > 1 and inner[last] == lanes:  # side-by-side vectors only of full width
            block[last] = _divisor_at_most(extents[last] // inner[last], recipe.max_vectors)
        budget = (registers - recipe.free_registers) // block.get(last, 1)  # accumulator rows that fit
        max_rows = recipe.rows(registers)
        rows_cap = min(max_rows, max(1, budget))
        alias_cap = None
        if reductions := [k for k, d in enumerate(decisions) if len(d) == 2]:  # the innermost one: contiguous
            alias_cap = recipe.aliasing_rows(4 * extents[reductions[-1]])
            if len(reductions) > 1:  # a conv's epilogue (a residual read, the output written) on rows as far apart
                alias_cap = min(alias_cap or max_rows, recipe.aliasing_rows(4 * extents[last]) or max_rows)
            rows_cap = min(rows_cap, alias_cap or rows_cap)
        one_vector_rows = min(max_rows, registers - recipe.free_registers, alias_cap or max_rows)
        for i, k in enumerate(reversed([k for k in spatial if k != last])):  # the axis before the vector first
            block[k] = _divisor_at_most(extents[k], rows_cap)
            if recipe.whole_odd_rows and i == 0 and 2 * block[k] < rows_cap and extents[k] <= budget:
                block[k] = extents[k]  # an odd extent (13) has no divisor near the cap: all 13 rows, not 1
            elif recipe.odd_rows_one_vector and i == 0 and 2 * block[k] < rows_cap < extents[k] <= one_vector_rows:
                block[k], block[last] = extents[k], 1  # AVX2's 7-wide stage: 7 rows x 1 vector, not 1 x 4
            rows_cap //= block[k]
            if rows_cap < 2 or not recipe.fill_outer_axes:
                break
        rows = _product(block.get(k, 1) for k in spatial if k != last)
        if recipe.grow_vectors and rows <= max_rows // 2 and inner[last] == lanes and len(spatial) > 1:
            # few rows (508 = 4 x 127): more vectors side by side keep more accumulators in flight; each vector
            # column needs rows accumulators and one weight register
            cap = min(max_rows // 2, (registers - recipe.free_registers) // (rows + 1))
            divisor = _pow2_divisor_at_most if recipe.pow2_vectors else _divisor_at_most
            block[last] = divisor(extents[last] // inner[last], cap)
    outer = {k: extents[k] // inner.get(k, 1) // block.get(k, 1) for k in spatial}
    second = {}
    reduction = _product(extents[k] for k in range(len(decisions)) if k not in spatial)
    weight_bytes = 4 * reduction * extents[last] if spatial and reduction > 1 else 0  # fp32 assumed
    if recipe.weights_outer and weight_bytes and weight_bytes >= recipe.weights_outer_bytes:
        second = _weights_outer(outer, [k for k in spatial if k != last], recipe.jobs_per_core * cores)
    out = []
    for k, d in enumerate(decisions):
        if len(d) != 4:
            out.append([extents[k]] + [1] * (len(d) - 1))
            continue
        out.append([outer[k], second.get(k, 1), block.get(k, 1), inner.get(k, 1)])
    return out


def _weights_outer(outer: dict[int, int], rows: list[int], min_jobs: int) -> dict[int, int]:
    """Moves the row axes' outer tiles (innermost axis first) from the parallel loops to the loop level inside them,
    while the parallel loops keep `min_jobs` iterations; returns {axis: tiles moved} and updates `outer`. The
    parallel loops then walk the weight columns' blocks outermost and every row block inside: one block of packed
    weights, K x 32 floats, stays in L2 while all rows use it (in the other order each row block streams all the
    weights: 2.4 MB for a 3x3x256x256 conv). Only for weights of `weights_outer_bytes` or more: with small weights
    the rows-outer order reads the input and a residual once, not once per column block. Measured in
    docs/performance.md ("Large weights stay put")."""
    moved = {}
    for k in reversed(rows):
        if _product(n for j, n in outer.items() if j != k) < min_jobs:
            break
        moved[k], outer[k] = outer[k], 1
    return moved


def _vector_axis(spatial: list[int], extents: list[int], lanes: int) -> int:
    """The last spatial axis, the contiguous one, unless it is shorter than a quarter vector; then the last axis
    that half a vector divides: an NCHW conv whose output width is 1 (magika's 5x1 convs: (1, 512, 508, 1))
    vectorises its 512 channels, not the unit axis (scalar code) or 508 rows (4 lanes). The weights are packed in
    that order, and the output is stored once per reduction. A last axis of 12 or 42 channels is vectorised as
    it is: moving the vector to the width (PP-OCRv4 detector's 48 -> 12 1x1 conv on 80x80) made every load a
    gather, 1.22 ms for 7.4 MFLOP, against 0.054 ms on the channels."""
    if extents[spatial[-1]] >= max(lanes // 4, 2):
        return spatial[-1]
    return next((k for k in reversed(spatial) if extents[k] % max(lanes // 2, 1) == 0), spatial[-1])


def _vector_width(extent: int, lanes: int) -> int:
    """The innermost tile of the contiguous axis: a power-of-two vector of at least half the lanes when one divides
    the extent, else the largest divisor up to the lanes."""
    width = lanes
    while width >= max(4, lanes // 2):
        if extent % width == 0:
            return width
        width //= 2
    return _divisor_at_most(extent, lanes)


def _product(factors) -> int:
    n = 1
    for f in factors:
        n *= int(f)
    return n


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
    for group in groups:
        decisions = [[int(x) for x in trace.decisions[i]] for i in group]
        new = heuristic_tiles(decisions, lanes, _registers(lanes), recipe, cores)
        for inst, dec in zip(group, new):
            trace = trace.with_decision(inst, [int(x) for x in dec], remove_postproc=True)
    out = Schedule(original)  # as MetaSchedule makes them: no per-step verification
    trace.apply_to_schedule(out, remove_postproc=True)
    return out


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


def _registers(lanes: int) -> int:
    """Vector registers of the ISA that has `lanes` fp32 lanes: AVX-512 has 32, AVX2 16."""
    return 32 if lanes >= 16 else 16


def template_space(func, lanes: int, recipe: TileRecipe = RECIPE, mutator_probs="llvm"):
    """The design space whose sketches the default schedule is a point of: the same rules in the same order
    (`_rules`, the vector length `heuristic_schedule` picks for `func`) and post-processing, with TVM's llvm
    mutators. Tuning in it starts at the default schedule (the seed record, tuning/seed.py) and mutates its tile
    sizes, unroll depth and parallel extent; TVM's llvm space orders inlining and tiling the other way for an
    epilogue, so a conv's default was no point of it and the search could only find it again by chance."""
    from tvm.s_tir import meta_schedule as ms

    extent = spatial_vector_extent(func, lanes) if recipe.fit_spatial_vectors else MAX_VECTOR_EXTENT
    return ms.space_generator.PostOrderApply(
        sch_rules=_rules(extent, recipe), postprocs=_postprocs(), mutator_probs=mutator_probs
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
