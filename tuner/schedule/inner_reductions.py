"""Inner reductions: a sum, mean or max over the innermost axes, contiguous in memory (NCHW global average pooling,
squeeze-and-excitation's mean over H and W in an NCHW model), its partial results in vectors.

MetaSchedule's CPU rules parallelise such a kernel over the kept axes and run each element's reduction as one scalar
loop, every add waiting on the one before: PP-OCRv4's recognizer's mean over 6x80 for each of 480 channels ran
0.087 ms where OpenVINO took 0.013. Here each element's run of the input is read a vector at a time into a
vector of partial results (`rfactor`), combined once at the end, and the epilogue (a mean's divide) follows:

    for o in parallel(kept):                   # every kept axis, fused
        part[:] = 0
        for k in range(R // lanes):             # the reduced axes, fused: one contiguous run
            part[:] += x[o, k * lanes : (k + 1) * lanes]   # vectorised
        y[o] = epilogue(sum(part))
"""

from __future__ import annotations

import math

from tuner.schedule.block_facts import extent, reduces, vector_width


def inner_reduction_schedule(func, lanes: int):
    """A `tvm.s_tir.Schedule` of `func` as above, or None when `func` is not an inner reduction or a step does not
    apply (the schedule primitives check every dependence, so a schedule returned is a correct one)."""
    from tvm.s_tir import Schedule

    sch = Schedule(func)
    reduction = _inner_reduction(sch, lanes)
    if reduction is None:
        return None
    try:
        _schedule(sch, reduction, lanes)
    except Exception:  # a primitive refused this kernel: it keeps the generic rules
        return None
    return sch


def _inner_reduction(sch, lanes: int):
    """The kernel's one reduction block when its reduced iterators come last and index the last axes of its one
    input, in order (a contiguous run per output element, at least two vectors long and a whole number of
    vectors), every other block element-wise; else None."""
    root = sch.get_sblock("root")
    blocks = sch.get_child_blocks(root)
    reductions = [b for b in blocks if reduces(sch.get(b))]
    if len(reductions) != 1 or any("schedule_rule" in sch.get(b).annotations for b in blocks):
        return None  # pools (TOPI marks the average's divide) keep their own rule
    block = sch.get(reductions[0])
    kinds = [int(it.iter_type) != 0 for it in block.iter_vars]
    if len(block.writes) != 1 or kinds != sorted(kinds) or len(sch.get_loops(reductions[0])) != len(kinds):
        return None  # the reduced iterators last, one loop each
    reduced = [it for it in block.iter_vars if int(it.iter_type) != 0]
    inputs = [r for r in block.reads if not r.source.same_as(block.writes[0].source)]
    if len(inputs) != 1 or len(inputs[0].region) < len(reduced):
        return None
    tail = inputs[0].region[len(inputs[0].region) - len(reduced) :]
    if not all(rng.min.same_as(it.var) for rng, it in zip(tail, reduced)):
        return None  # read at the reduced iterators themselves
    shape = [int(getattr(n, "value", 0)) for n in inputs[0].source.shape[len(inputs[0].region) - len(reduced) :]]
    if 0 in shape or shape != [extent(it) for it in reduced]:
        return None  # whole trailing axes of known length (not a symbolic width): the run is contiguous
    run = math.prod(shape)
    if run < 2 * lanes or vector_width(run, lanes) == 1:
        return None
    return reductions[0]


def _schedule(sch, reduction, lanes: int) -> None:
    root = sch.get_sblock("root")
    blocks = sch.get_child_blocks(root)
    position = next(i for i, b in enumerate(blocks) if sch.get(b).same_as(sch.get(reduction)))
    for producer in blocks[:position]:  # element-wise producers: read where they are used
        sch.compute_inline(producer)
    iters = sch.get(reduction).iter_vars
    kept = sum(int(it.iter_type) == 0 for it in iters)
    loops = sch.get_loops(reduction)
    run = sch.fuse(*loops[kept:]) if len(loops) - kept > 1 else loops[kept]
    width = vector_width(int(sch.get(run).extent), lanes)
    _, lane = sch.split(run, [None, width])
    partial = sch.rfactor(lane, kept)  # the partial results' lane axis last: contiguous
    outer = sch.get_loops(partial)[:kept]
    jobs = sch.fuse(*outer) if len(outer) > 1 else outer[0]
    sch.parallel(jobs)
    sch.vectorize(sch.get_loops(partial)[-1])
    for consumer in sch.get_child_blocks(root)[1:]:  # the combine, then the epilogue, per output element
        sch.reverse_compute_at(consumer, jobs)
