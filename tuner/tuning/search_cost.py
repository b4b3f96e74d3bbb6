"""What one search batch of a task will cost, known before it starts, so a time budget can size it.

A batch is an evolutionary search (every member of the population is drawn, mutated over 4 generations and
scored: each a trace applied, post-processed and its features extracted), then `per_iter` candidates built and
run. Per candidate, that work differs 5x between kernels: 9 ms for a direct conv, 43 ms for a Winograd conv
(its unrolled transforms) on these 2-core machines; at population 512 the Winograd conv's search took 63 s, and
that one batch ran a 40 s budget to 86 s. So each task's cost per candidate is probed once
(`candidate_seconds`: a few of its design-space schedules through the same steps), and the deadline picks the
largest population whose batch fits the time left (`deadline.Deadline.plan`)."""

from __future__ import annotations

import time

# evolutionary search handles each population member about this many times: the initial sample, 4 generations of
# mutation (MetaSchedule's genetic_num_iters), the final pick; a fit to batches timed on these machines
SEARCH_PASSES = 6
# building and running one candidate on 2 workers: 0.41 s for a direct conv, 0.78 s for a Winograd one; the build
# grows with the IR as the search does, so a fixed part plus a multiple of the search cost per candidate
MEASURE_S = 0.3
MEASURE_PER_SEARCH_S = 11.0
POPULATIONS = (512, 256, 128, 64)  # largest first: MetaSchedule's default, halved while a batch does not fit
PROBES = 4  # schedules probed per task: ~0.04 s for a conv, ~0.2 s for a Winograd conv


def candidate_seconds(task, space) -> float:
    """Seconds one search candidate of `task` costs in `space`: a design-space schedule's trace applied to a fresh
    schedule, post-processed, and its features extracted, averaged over `PROBES` of them."""
    import tvm
    from tvm.s_tir import meta_schedule as ms

    from tuner.tuning.spaces import bare_context

    ctx = bare_context(task, space)
    spaces = ctx.generate_design_space()
    func = task.dispatched[0]
    start = time.perf_counter()
    candidates = []
    for i in range(PROBES):
        sch = tvm.s_tir.Schedule(func, seed=i + 1)
        spaces[i % len(spaces)].trace.apply_to_schedule(sch, remove_postproc=True)
        sch.enter_postproc()
        if all(p.apply(sch) for p in ctx.space_generator.postprocs):
            candidates.append(ms.MeasureCandidate(sch, ms.arg_info.ArgInfo.from_prim_func(func["main"])))
    if candidates:
        ms.feature_extractor.PerStoreFeature().extract_from(ctx, candidates)
    return (time.perf_counter() - start) / PROBES


def batch_seconds(candidate_s: float, population: int, per_iter: int, threads: int) -> float:
    """A batch's expected seconds before the deadline's calibration: the search, then the measurements."""
    search = candidate_s * population * SEARCH_PASSES / max(1, threads)
    return search + per_iter * (MEASURE_S + MEASURE_PER_SEARCH_S * candidate_s)
