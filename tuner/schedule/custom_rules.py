"""The schedule rules TOPI's pooling computes ask for by name.

TOPI marks its pooling blocks `schedule_rule="meta_schedule.pool_max"` (also pool_avg, adaptive_pool_max,
adaptive_pool_avg), naming rules that TVM 0.27 does not ship. MetaSchedule's ApplyCustomRule looks each name up
as a global function `s_tir.meta_schedule.<target key>.<name>`; when none exists it writes a warning through TVM's
C++ log (straight to the terminal, past `-q`), drops the annotation and lets the generic rules schedule the block.
Registering the names as that same fall-through silences the warning at its source. On CPU, a pooling block whose
window slides over outer axes (NHWC: the channels innermost, as the CPU layout leaves every pooling) gets a schedule
first (`channels_innermost_pool`): the generic rules left the window's loops innermost, scalar, after a pass that
wrote the padded input out.
"""

from __future__ import annotations

import contextlib

from tuner.schedule.block_facts import MAX_VECTOR_EXTENT, reduces, whole_vectors_up_to

POOL_RULES = ("pool_max", "pool_avg", "adaptive_pool_max", "adaptive_pool_avg")
TARGET_KEYS = ("cpu", "gpu")  # llvm targets carry the key "cpu"; cuda targets "cuda" and "gpu"


def _generic_rules(sch, block):
    """What ApplyCustomRule does for an unknown rule, without the warning: the block goes to the other rules."""
    sch.unannotate(block, "schedule_rule")
    return [sch]


def channels_innermost_pool(sch, block):
    """A pooling block whose input's innermost axis is the output's (NHWC: channels): the padding inlined (a select
    on each load instead of a padded copy of the input written and read back) and the window's loops moved outside
    the innermost output axis, which ParallelizeVectorizeUnroll then vectorises; an average's division runs on each
    output pixel right after its sum. Other pools (NCHW: the window slides along the innermost axis) go to the
    generic rules as before."""
    sch.unannotate(block, "schedule_rule")
    # the block that runs the window: the annotated one, or for TOPI's average its producer, the sum
    producers = sch.get_producers(block)
    window = block if reduces(sch.get(block)) else next((p for p in producers if reduces(sch.get(p))), None)
    if window is None or not _window_outside_innermost_axis(sch.get(window)):
        return [sch]
    for producer in sch.get_producers(window):
        with contextlib.suppress(Exception):  # only padding and other injective producers inline
            sch.compute_inline(producer)
    loops, iters = sch.get_loops(window), sch.get(window).iter_vars
    if len(loops) != len(iters):
        return [sch]
    spatial = [loop for loop, it in zip(loops, iters) if it.iter_type == 0]
    chunk = _vector_chunk(int(getattr(sch.get(spatial[-1]).extent, "value", 0)))
    if chunk:  # ParallelizeVectorizeUnroll vectorises up to 64 lanes: wider channel axes in chunks it takes
        spatial[-1:] = sch.split(spatial[-1], [None, chunk])
    sch.reorder(*[loop for loop, it in zip(loops, iters) if it.iter_type != 0], spatial[-1])
    if len(spatial) > 1 and not sch.get(block).same_as(sch.get(window)):
        sch.reverse_compute_at(block, spatial[-2])
    return [sch]


def _vector_chunk(width: int) -> int | None:
    """The innermost axis's chunk when it is wider than ParallelizeVectorizeUnroll's 64 lanes: its largest divisor
    up to 64 that is a whole number of 16-, else 8-, else 4-float vectors (200 channels: 40; 2048: 64); None when
    the axis fits whole, is symbolic or has no such divisor. Unsplit, the PP-OCR classifier's 2 x 2 max pool over
    200 channels ran scalar (0.033 ms, TVM's unscheduled loop 0.007) and ResNet-50's global mean over 2048 too."""
    if width <= MAX_VECTOR_EXTENT:
        return None
    return next(filter(None, (whole_vectors_up_to(width, m, MAX_VECTOR_EXTENT) for m in (16, 8, 4))), None)


def _window_outside_innermost_axis(block) -> bool:
    """Every input's innermost index is the output's innermost spatial iterator, alone."""
    spatial = [it.var for it in block.iter_vars if it.iter_type == 0]
    if not spatial or not block.writes:
        return False
    out = block.writes[0].source
    inputs = [r for r in block.reads if not r.source.same_as(out)]
    return bool(inputs) and all(
        r.region[-1].min.same_as(spatial[-1]) and int(getattr(r.region[-1].extent, "value", 0)) == 1 for r in inputs
    )


def register() -> None:
    import tvm_ffi

    for key in TARGET_KEYS:
        for rule in POOL_RULES:
            name = f"s_tir.meta_schedule.{key}.meta_schedule.{rule}"
            if tvm_ffi.get_global_func(name, allow_missing=True) is None:
                tvm_ffi.register_global_func(name, channels_innermost_pool if key == "cpu" else _generic_rules)


register()
