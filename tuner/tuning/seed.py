"""Seed the search with the default schedule: before the first round, each task without records gets its heuristic
schedule (`default_schedule`) built, measured and committed as a record. The evolutionary search starts its
population from the database's best, and the database never holds a best record worse than the schedule the
package would otherwise get."""

from __future__ import annotations

import os
import shutil

from tuner.core.target import vector_lanes
from tuner.schedule.default_schedule import heuristic_schedule
from tuner.tuning.priority import heaviest_first
from tuner.tuning.state import refresh, trials_in_db

SEED_CHUNK = 8  # tasks built and measured together: the pool stays busy, and a time budget is checked between


def seed_defaults(run, target_spec, budget, builder, runner, progress) -> int:
    """Before the first round of a tune-model run (`run`: loop._Run): each untried task's default schedule
    measured as its first record, heaviest first; seeds timed far slower alone than their kernels ran in the
    model are measured again. Returns the trials spent."""
    db_dir = run.db_dir
    before = trials_in_db(db_dir)
    progress.stage("seed", f"the default schedule of {min(budget, len(run.tunable))} kernels, measured")
    untried = {id(st) for _, st in run.tunable if not st.trials}
    seed_records(heaviest_first(run.tunable)[:budget], target_spec, run.db, builder, runner, run.deadline)
    refresh(run.states, db_dir)
    seeded = [ts for ts in run.tunable if id(ts[1]) in untried]
    for _, st in seeded:  # its one record is its default schedule: the in-model factor's denominator
        st.default_ms = st.best_ms
    again = remeasure_suspect_seeds(seeded, target_spec, run.db, builder, runner)
    if again:
        progress.stage("seed", f"{len(again)} default schedule(s) timed slower alone than in the model: again")
        refresh(run.states, db_dir)
        for _, st in again:
            st.default_ms = st.best_ms
    progress.trials(trials_in_db(db_dir) - before)
    run.save()
    return trials_in_db(db_dir) - before


def seed_records(tunable, target_spec, db, builder, runner, deadline=None) -> int:
    """Measure and commit the heuristic schedule of every (task, state) without trials, heaviest first (in the
    model when it was profiled) and `SEED_CHUNK` at a time; returns how many. With a `deadline`
    (tuning/deadline.py), no chunk after the first starts that would end past it, judged by the last chunk's
    time: a warm run with many new kernels spent 23 s past its 2-minute budget seeding them all. A task left
    unseeded still gets the default schedule in the package."""
    import time

    todo = heaviest_first([ts for ts in tunable if not ts[1].trials])
    committed, took = 0, 0.0
    for start in range(0, len(todo), SEED_CHUNK):
        if start and deadline is not None and time.time() + took >= deadline.at:
            break
        t0 = time.time()
        committed += _seed_chunk(todo[start : start + SEED_CHUNK], target_spec, db, builder, runner)
        took = time.time() - t0
    return committed


SUSPECT_FACTOR = 0.67  # a seed timed alone over 1.5x its kernel's time in the model is measured again


def remeasure_suspect_seeds(seeded, target_spec, db, builder, runner) -> list:
    """Measure again the seeds of the (task, state) pairs whose default schedule ran alone much slower than the
    same kernel ran in the model (in-model factor under `SUSPECT_FACTOR`): alone it has its caches hot and the
    machine to itself, so only a disturbed measurement is slower. The seed is the line every candidate must
    beat: on a shared 2-vCPU machine a recognizer's first four seeds were timed at 2x (0.949 ms for a conv that
    runs 0.488 ms), the search then "beat" them with records 2x slower than the default, and all of them were
    left out in the model after the budget was spent. The new record joins the old; the better one counts.
    Returns the pairs measured again."""
    suspect = [ts for ts in seeded if ts[1].in_model_factor is not None and ts[1].in_model_factor < SUSPECT_FACTOR]
    for start in range(0, len(suspect), SEED_CHUNK):
        _seed_chunk(suspect[start : start + SEED_CHUNK], target_spec, db, builder, runner)
    return suspect


def _seed_chunk(tunable, target_spec, db, builder, runner) -> int:
    target = target_spec.tvm_target()
    lanes = vector_lanes(target_spec)
    todo = []
    for task, _ in tunable:
        sch = heuristic_schedule(task.dispatched[0]["main"], target, lanes)
        if sch is not None:
            todo.append((task, sch))
    return measure_schedules(todo, target_spec, db, builder, runner)


def measure_schedules(todo, target_spec, db, builder, runner) -> int:
    """Build and run each (task, schedule) of `todo` with the tuner's builder and runner and commit the measured
    ones as records of their tasks' workloads; returns how many were committed."""
    from tvm.s_tir import meta_schedule as ms

    if not todo:
        return 0
    target = target_spec.tvm_target()
    built = builder.build([ms.builder.BuilderInput(sch.mod, target) for _, sch in todo])
    ok = [(task, sch, b) for (task, sch), b in zip(todo, built) if b.error_msg is None]
    args = [ms.arg_info.ArgInfo.from_entry_func(sch.mod, remove_preproc=True) for _, sch, _ in ok]
    inputs = [
        ms.runner.RunnerInput(b.artifact_path, "cuda" if target_spec.is_gpu else "cpu", a)
        for (_, _, b), a in zip(ok, args)
    ]
    committed = 0
    for (task, sch, b), a, future in zip(ok, args, runner.run(inputs) if inputs else []):
        result = future.result()
        shutil.rmtree(os.path.dirname(b.artifact_path), ignore_errors=True)
        if result.error_msg is not None or not result.run_secs:
            continue
        workload = db.commit_workload(task.dispatched[0])
        secs = [float(x) for x in result.run_secs]
        db.commit_tuning_record(ms.database.TuningRecord(sch.trace, workload, secs, target, a))
        committed += 1
    return committed
