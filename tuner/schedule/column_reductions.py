"""Column reductions: a sum, mean or max over outer axes, the innermost axis kept (NHWC global average pooling,
squeeze-and-excitation's mean over H and W, a mean over tokens) scheduled with that axis in vectors, innermost.

MetaSchedule's CPU rules parallelise such a kernel over the kept axis and run each element's reduction as a scalar
loop down a column: MobileNetV3's squeeze-and-excitation mean over 28x28x120 walked 784 pixels 480 bytes apart
for each of 120 channels, every cache line loaded by 16 channels in turn (0.025 ms timed alone, six such kernels
7% of the model). Here each parallel job owns a contiguous run of the kept axis and reads the input once, row
after row, its accumulators a few vectors wide:

    for chunk in parallel(cores):               # the kept axis in `cores` runs of whole vectors
        for h, w:                               # the reduced axes
            for v in vectors of the chunk:
                acc[v, :] += x[h, w, v, :]      # vectorised
        y[chunk] = acc[chunk] / (H * W)         # the epilogue (a mean's divide) on the chunk, vectorised
"""

from __future__ import annotations

from tuner.schedule.block_facts import MIN_WIDTH, extent, reduces, vector_width


def column_schedule(func, lanes: int, cores: int):
    """A `tvm.s_tir.Schedule` of `func` as above, or None when `func` is not a column reduction or a step does not
    apply (the schedule primitives check every dependence, so a schedule returned is a correct one)."""
    from tvm.s_tir import Schedule

    sch = Schedule(func)
    reduction = _column_reduction(sch)
    if reduction is None:
        return None
    try:
        _schedule(sch, reduction, lanes, max(1, cores))
    except Exception:  # a primitive refused this kernel: it keeps the generic rules
        return None
    return sch


def _column_reduction(sch):
    """The kernel's one reduction block when it reduces outer axes of one input into an output whose innermost
    axis (at least MIN_WIDTH long) it reads at that axis alone, every other block element-wise; else None."""
    root = sch.get_sblock("root")
    blocks = sch.get_child_blocks(root)
    reductions = [b for b in blocks if reduces(sch.get(b))]
    if len(reductions) != 1:
        return None
    if any("schedule_rule" in sch.get(b).annotations for b in blocks):
        return None  # pools (TOPI marks the average's divide, not its sum) keep their own rule
    block = sch.get(reductions[0])
    if len(block.writes) != 1:
        return None
    iters = block.iter_vars
    kinds = [int(it.iter_type) != 0 for it in iters]
    spatial = [it for it in iters if int(it.iter_type) == 0]
    if not spatial or not kinds[-1] or kinds != sorted(kinds) or vector_width(extent(spatial[-1]), MIN_WIDTH) == 1:
        return None  # the reduced axes come last in the block's iterators, the kept axis takes vectors
    if len(sch.get_loops(reductions[0])) != len(iters):
        return None
    out = block.writes[0].source
    inputs = [r for r in block.reads if not r.source.same_as(out)]
    if len(inputs) != 1 or not inputs[0].region[-1].min.same_as(spatial[-1].var):
        return None  # one input (a conv reads weights too), read at the kept axis alone
    others = [sch.get(b) for b in blocks if not sch.get(b).same_as(block)]
    if any(reduces(b) for b in others):
        return None
    return reductions[0]


def _schedule(sch, reduction, lanes: int, cores: int) -> None:
    root = sch.get_sblock("root")
    blocks = sch.get_child_blocks(root)
    position = next(i for i, b in enumerate(blocks) if sch.get(b).same_as(sch.get(reduction)))
    for producer in blocks[:position]:  # element-wise producers (an activation): read where they are used
        sch.compute_inline(producer)
    *outer, kept = [lp for lp, it in zip(sch.get_loops(reduction), sch.get(reduction).iter_vars) if it.iter_type == 0]
    reduced = sch.get_loops(reduction)[len(outer) + 1 :]
    width = vector_width(int(sch.get(kept).extent), lanes)
    vectors, lane = sch.split(kept, [None, width])
    chunk, vector = sch.split(vectors, [cores, None])
    sch.reorder(*outer, chunk, *reduced, vector, lane)
    jobs = sch.fuse(*outer, chunk) if outer else chunk
    sch.parallel(jobs)
    sch.vectorize(lane)
    for consumer in sch.get_child_blocks(root)[1:]:  # the epilogue, on each job's chunk right after its sum
        sch.reverse_compute_at(consumer, jobs)
        inner = sch.get_loops(consumer)[-1]
        if int(sch.get(inner).extent) % width == 0:  # the kept axis takes whole vectors: its run of it does too
            sch.vectorize(sch.split(inner, [None, width])[1])
