"""The default schedule's neighbours, measured before the search: the template's knobs moved one at a time.

The default schedule is one point of its template (schedule/recipes.py: register block rows and vectors, which
loops hold the weights, parallel jobs, unroll depth, where the epilogue runs); the recipe's values won on average
over whole models, not for each kernel. The evolutionary search mutates the default's tile sizes one factor at a
time, which mostly breaks its vectors: in a 5-minute tune of a text detector a Winograd conv's 97 candidates ran
at a median 4x its default and none beat it. Here each kernel that holds time above its compute floor gets the
schedules of `NEIGHBOURS` (each a whole schedule by the same rules, so every one is valid by construction),
those that differ from the default are measured, and they join the database as records: the best wins, and the
search starts its population from it. AutoTVM's way (a template with knobs), inside MetaSchedule's database.
"""

from __future__ import annotations

import time

from tuner.core.target import vector_lanes
from tuner.tuning.priority import heaviest_first
from tuner.tuning.seed import SEED_CHUNK, measure_schedules

MAX_TASKS = 12  # kernels given their neighbours, those with the most time above their floor first
SHARE = 0.5  # of the trials left after the seeds, or of a time budget, at most: the search gets the rest


def neighbour_schedules(func, target, lanes: int) -> list[tuple[str, object]]:
    """[(knob moved, schedule)] for the recipe neighbours of `func`'s default schedule that make a program other
    than the default and than each other."""
    from tuner.core.ir import same_program
    from tuner.schedule.default_schedule import heuristic_schedule
    from tuner.schedule.recipes import NEIGHBOURS

    default = heuristic_schedule(func, target, lanes)
    if default is None:
        return []
    seen, out = [default.mod["main"]], []
    for label, recipe in NEIGHBOURS.items():
        try:
            sch = heuristic_schedule(func, target, lanes, recipe=recipe)
        except Exception:  # a knob this kernel's rules cannot take: the others still count
            continue
        if sch is None or any(same_program(sch.mod["main"], f) for f in seen):
            continue
        seen.append(sch.mod["main"])
        out.append((label, sch))
    return out


def neighbour_tasks(tunable, min_headroom: float) -> list:
    """The (task, state) pairs whose neighbours are measured: the `MAX_TASKS` with the most time above their floor
    among those seeded in this run (`default_ms` set). A task with records from before (a resumed run, or a warm
    start whose library holds its records) was searched already: its neighbours are in the database, or beaten."""
    return [ts for ts in heaviest_first(tunable, min_headroom) if ts[1].default_ms is not None][:MAX_TASKS]


def measure_neighbours(run, target_spec, budget: int, builder, runner, progress) -> int:
    """Measure the neighbours of the default schedule of the `MAX_TASKS` tunable tasks (of `run`, a loop._Run)
    with the most in-model time above their compute floor, within `SHARE` of the `budget` trials left and of the
    time budget; returns the trials spent."""
    until = run.start + run.knobs.time_budget_s * SHARE if run.knobs.time_budget_s else None
    if until is not None and time.time() >= until:  # the seeds took the share already: the search gets the rest
        return 0
    target, lanes = target_spec.tvm_target(), vector_lanes(target_spec)
    todo = []
    for task, _ in neighbour_tasks(run.tunable, run.knobs.min_headroom):
        todo += [(task, sch) for _, sch in neighbour_schedules(task.dispatched[0]["main"], target, lanes)]
    todo = todo[: max(1, int(budget * SHARE))]
    if not todo:
        return 0
    kernels = len({id(task) for task, _ in todo})
    progress.stage("neighbours", f"{len(todo)} schedules one knob from the default, of {kernels} kernel(s)")
    spent, took = 0, 0.0
    for start in range(0, len(todo), SEED_CHUNK):
        if start and until is not None and time.time() + took >= until:
            break
        t0 = time.time()
        spent += measure_schedules(todo[start : start + SEED_CHUNK], target_spec, run.db, builder, runner)
        took = time.time() - t0
    return spent
