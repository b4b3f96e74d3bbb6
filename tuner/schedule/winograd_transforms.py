"""The schedules of Winograd's input and output transforms (tuner/winograd.py) on CPU, as ApplyCustomRule rules.

Each transform is two 1-D passes of sums over 6 (or 4) positions with constant coefficients. Left to the generic
rules they would be reductions tiled like a matmul, coefficients loaded from a constant matrix. Here a parallel
job takes one tile and one vector of channels (NHWC: contiguous), the first pass is computed inside it, every
position loop is unrolled so the coefficients fold to constants (zeros vanish), and the channels are the vector
lanes. The output transform writes the NHWC output tile, and the epilogue (bias, activation, residual) runs on
that tile right after it.
"""

from __future__ import annotations

import contextlib

from tuner.legalize.winograd import INPUT_RULE, OUTPUT_RULE
from tuner.schedule.block_facts import vector_width

LANES = 16  # the rules get no target: AVX-512's width; LLVM splits a 16-lane vector in two on AVX2


def _inline_constants(sch, block) -> None:
    for producer in sch.get_producers(block):
        if not sch.get(producer).reads:  # a constant matrix
            sch.compute_inline(producer)


def input_transform(sch, block):
    """data_pack[eps, nu, tile, c] = sum_rb rows[eps, rb, tile, c] B[rb, nu]; rows (the first pass, with the
    padding as a select on each load) is computed per job."""
    sch.unannotate(block, "schedule_rule")
    _inline_constants(sch, block)
    (rows,) = sch.get_producers(block)
    for producer in sch.get_producers(rows):
        with contextlib.suppress(Exception):  # the padding: a select on each load
            sch.compute_inline(producer)
    _inline_constants(sch, rows)
    eps, nu, tile, channel, rb = sch.get_loops(block)
    width = vector_width(int(sch.get(channel).extent), LANES)
    outer, vector = sch.split(channel, [None, width])
    sch.reorder(tile, outer, eps, nu, rb, vector)
    job = sch.fuse(tile, outer)
    sch.parallel(job)
    _pass_inside(sch, rows, job)
    for loop in (eps, nu, rb):
        sch.unroll(loop)
    sch.vectorize(vector)
    return [sch]


def output_transform(sch, block):
    """out[n, y, x, o] = sum_sb cols[y % m, sb, tile, o] A[sb, x % m]: one job per output tile and vector of
    channels, cols (the first pass) computed in it, the epilogue after it on the same tile."""
    sch.unannotate(block, "schedule_rule")
    _inline_constants(sch, block)
    (cols,) = sch.get_producers(block)
    _inline_constants(sch, cols)
    m = int(sch.get(sch.get_loops(cols)[0]).extent)
    i, y, x, o, sb = sch.get_loops(block)
    yo, yi = sch.split(y, [None, m])
    xo, xi = sch.split(x, [None, m])
    oo, ov = sch.split(o, [None, vector_width(int(sch.get(o).extent), LANES)])
    sch.reorder(i, yo, xo, oo, yi, xi, sb, ov)
    job = sch.fuse(i, yo, xo, oo)
    sch.parallel(job)
    _pass_inside(sch, cols, job)
    for loop in (yi, xi, sb):
        sch.unroll(loop)
    sch.vectorize(ov)
    _epilogue_at(sch, block, job)
    return [sch]


def _epilogue_at(sch, block, job) -> None:
    """The element-wise chain after the output transform as one block (each inlined into the next), computed on
    each job's tile with its channels in vectors."""
    consumers = sch.get_consumers(block)
    while len(consumers) == 1:
        if not sch.get_consumers(consumers[0]):
            with contextlib.suppress(Exception):
                sch.reverse_compute_at(consumers[0], job, preserve_unit_loops=False)
                sch.vectorize(sch.get_loops(consumers[0])[-1])
            return
        try:
            sch.compute_inline(consumers[0])
        except Exception:
            return
        consumers = sch.get_consumers(block)


def _pass_inside(sch, first, job) -> None:
    """The first pass computed in each job: [position, position, channel, reduction] -> the reduction outside the
    channels, positions unrolled, channels in vectors."""
    sch.compute_at(first, job, preserve_unit_loops=False)
    loops = sch.get_loops(first)[1:]  # under the job
    *positions, channel, reduce = loops
    sch.reorder(reduce, channel)
    for loop in (*positions, reduce):
        sch.unroll(loop)
    sch.vectorize(channel)


def register() -> None:
    import tvm_ffi

    for rule, fn in ((INPUT_RULE, input_transform), (OUTPUT_RULE, output_transform)):
        name = f"s_tir.meta_schedule.cpu.{rule}"
        if tvm_ffi.get_global_func(name, allow_missing=True) is None:
            tvm_ffi.register_global_func(name, fn)


register()
