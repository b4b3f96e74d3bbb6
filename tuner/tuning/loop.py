"""tune-model's search loop: MetaSchedule over every fused kernel, with budget accounting, resume and kill safety.

The loop, in rounds (so time budgets, Ctrl-C and progress have a place to act):

    tasks   = extract_tasks(fused module)            # one per distinct fused kernel
    warm start: best records + cost model from schedules/<target-key> for the kernels it knows
    tasks  -= trivial (FLOPs < knobs.trivial_flops) and --only/--skip filters
    each task's in-model time: the default build's profile with the model's constants (model_profile.py)
    tasks   = the heaviest (in-model time) when the budget cannot give each one search iteration
    done    = trials already recorded per task        # from the database files, not a counter we keep
    seed each untried task with its measured default schedule   (CPU; seconds, records at once)
    while budget left and time left:
        chosen = where_time_goes(tasks)               # 4 largest in-model estimates, halved per stalled round
        tune_tasks(chosen, 2 iterations each, gradient task scheduler, XGB cost model shared across rounds)
        save cost model + manifest                    # the deadline ends a round when the next batch would overrun
"""

from __future__ import annotations

import dataclasses
import fnmatch
import logging
import os
import time
from dataclasses import dataclass, field

from tuner.core.errors import TunerError
from tuner.core.ir import flops
from tuner.tuning.builder import fast_build
from tuner.tuning.database import store as D
from tuner.tuning.database.warm_start import warm_start
from tuner.tuning.deadline import Deadline
from tuner.tuning.knobs import UNLIMITED, Knobs, per_iteration
from tuner.tuning.neighbours import measure_neighbours
from tuner.tuning.priority import (
    above_floor,
    count_stalls,
    heaviest_first,
    holding_time,
    in_model_estimates,
    where_time_goes,
)
from tuner.tuning.progress import Progress, RoundStatus, measure_callback
from tuner.tuning.rpc import runner as make_runner
from tuner.tuning.search_cost import POPULATIONS, batch_seconds, candidate_seconds
from tuner.tuning.seed import seed_defaults
from tuner.tuning.spaces import round_contexts, with_design_space
from tuner.tuning.state import TaskState, TuneResult, refresh, trials_in_db
from tuner.tuning.tasks import extract_tasks


def tune(
    fused_mod,
    target_spec,
    db_dir: str,
    knobs: Knobs,
    resume: bool,
    model_key: str,
    fusion: str,
    progress=None,
    warm_from: str | None = None,
    model_profile=None,
) -> TuneResult:
    """Tune every kernel of `fused_mod` into the database at `db_dir` (locked for the duration), starting from
    the records of the database `warm_from` (see warm_start) when given. With `model_profile` (a
    model_profile.ModelProfile of the default build), tasks are ranked by their share of the model's latency;
    without it, by their isolated time x calls."""
    from filelock import FileLock, Timeout

    os.makedirs(db_dir, exist_ok=True)
    lock = FileLock(os.path.join(db_dir, D.LOCK))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        raise TunerError(
            f"tuning database {db_dir} is in use by another tune-model run",
            "wait for it to finish, or tune into another --db",
        ) from None
    progress = progress or Progress()
    try:
        return _tune_locked(
            fused_mod, target_spec, db_dir, knobs, resume, model_key, fusion, progress, warm_from, model_profile
        )
    finally:
        lock.release()


@dataclass
class _Run:
    """What one tune-model run carries from round to round."""

    db_dir: str
    db: object
    manifest: dict
    states: list
    tunable: list
    knobs: Knobs
    model_key: str
    fusion: str
    wall_before: float
    cost_model: object = None
    start: float = field(default_factory=time.time)
    deadline: Deadline | None = None  # the time budget, shared by every round so it knows how long a batch takes
    profile: object = None  # the default build's in-model profile (model_profile.ModelProfile), when taken

    def save(self):
        D.save_progress(
            self.db_dir,
            self.manifest,
            self.states,
            self.model_key,
            self.fusion,
            time.time() - self.start,
            self.cost_model,
            self.knobs,
            self.wall_before,
        )


def _tune_locked(
    fused_mod, target_spec, db_dir, knobs, resume, model_key, fusion, progress, warm_from, profile
) -> TuneResult:

    db, manifest, repairs = D.open_database(db_dir, target_spec, create=True, writer=True)
    manifest = manifest or D.new_manifest(target_spec, fusion)
    D.write_manifest(db_dir, manifest)  # before the first record: records never exist without their target
    extracted = extract_tasks(fused_mod, target_spec)
    warm = warm_start(db, db_dir, extracted, warm_from, target_spec)
    states, tunable, shared = _task_states(extracted, db_dir, knobs, manifest, model_key, warm.hashes)
    for st in states if profile is not None else ():
        st.model_ms = profile.ms_by_workload.get(st.workload_hash)
        st.floor_ms = profile.floor_ms(st.flops * st.weight) if st.flops else None
    tunable = with_design_space(tunable, target_spec, fused_mod, template=knobs.space == "template")
    done_before = sum(st.trials for _, st in tunable) if resume else 0
    budget = max(0, knobs.trials - done_before)
    if knobs.max_trials_per_task:
        tunable = [(t, st) for t, st in tunable if not resume or st.trials < knobs.max_trials_per_task]
    knobs = dataclasses.replace(knobs, num_trials_per_iter=per_iteration(knobs, budget, len(tunable)))
    tunable = _fit_budget(tunable, budget, knobs)
    run = _Run(
        db_dir, db, manifest, states, tunable, knobs, model_key, fusion, float(manifest.get("wall_seconds", 0.0))
    )
    run.profile = profile
    run.cost_model = _cost_model(knobs, target_spec, db_dir, resume or warm.cost_model)
    run.deadline = Deadline(run.start + knobs.time_budget_s) if knobs.time_budget_s else None
    spent, stopped = _rounds(run, target_spec, budget, progress)
    refresh(states, db_dir)
    run.save()
    total_trials = sum(s.trials for s in states)
    return TuneResult(db_dir, states, spent, total_trials, time.time() - run.start, stopped, shared, repairs, warm)


def _task_states(extracted, db_dir, knobs, manifest, model_key, warm_hashes=frozenset()):
    """(every task's state, the (task, state) pairs to tune, tasks whose records another model made; kernels
    started from the schedules/ library are reported as the warm start, not here)."""
    import tvm_ffi

    hashes, counts = D.workload_hashes(db_dir), D.record_counts(db_dir)
    states, tunable, shared = [], [], 0
    for t in extracted:
        h = str(tvm_ffi.structural_hash(t.dispatched[0]))
        st = TaskState(t.task_name, flops(t.dispatched[0]), int(t.weight), h)
        if h in hashes:
            c = counts.get(hashes.index(h), {})
            st.trials, st.best_ms = c.get("trials", 0), (c["best_s"] * 1e3 if c.get("best_s") else None)
            if st.trials and model_key not in manifest.get("models", {}) and h not in warm_hashes:
                shared += 1
        st.skipped = _selected(t.task_name, knobs) or (
            f"trivial ({st.flops:.0f} FLOPs < {knobs.trivial_flops:.0f}): default schedule"
            if st.flops < knobs.trivial_flops
            else None
        )
        states.append(st)
        if not st.skipped:
            tunable.append((t, st))
    return states, tunable, shared


def _fit_budget(tunable, budget, knobs):
    """The gradient scheduler first gives every task one iteration, in task order: with a budget smaller than
    that, spend it on the kernels that hold the model's time instead of the first ones."""
    # heaviest first: the scheduler's first pass over the tasks goes in list order, and a time budget may end it
    ranked = heaviest_first(tunable, knobs.min_headroom)
    fits = max(1, budget // knobs.num_trials_per_iter)
    if not budget or len(ranked) <= fits:
        return ranked
    for _, st in ranked[fits:]:
        st.skipped = f"budget covers {fits} task(s); lighter kernel left on its default schedule"
    return ranked[:fits]


def _cost_model(knobs, target_spec, db_dir, resume: bool):
    """A new XGB model, or the database's saved one on resume or warm start."""
    from tvm.s_tir import meta_schedule as ms

    cores = target_spec.config.get("num-cores", 1)
    if knobs.cost_model != "xgb":
        return ms.cost_model.CostModel.create(knobs.cost_model, num_tuning_cores=cores)
    model = ms.cost_model.XGBModel(num_tuning_cores=cores)
    path = os.path.join(db_dir, D.COST_MODEL)
    if resume and os.path.exists(path):
        try:
            model.load(path)  # resume with what the model learned, not from scratch
        except Exception:  # an unreadable or untrained model file: learn again from this run's measurements
            model = ms.cost_model.XGBModel(num_tuning_cores=cores)
    return model


def _rounds(run: _Run, target_spec, budget, progress) -> tuple[int, str]:
    """Tune in rounds until the budget, the time or the patience runs out: (trials spent, why it stopped).

    Each round tunes the few tasks where the model's time goes now (best measured time x calls), so a time budget
    is spent on the heaviest kernels first and moves on as they get faster. One `tune_tasks` over every task would
    first run an iteration of evolutionary search for each of them (about 20 s each on 2 cores; PP-OCR has 56)
    before measuring anything."""
    from tvm.s_tir import meta_schedule as ms

    knobs, db_dir = run.knobs, run.db_dir
    cores = target_spec.config.get("num-cores", 1)
    builder = ms.builder.LocalBuilder(f_build=fast_build, timeout_sec=knobs.builder_timeout_s, max_workers=cores)
    # Runner workers inherit the environment when they start: measure with the threads the package will run with
    # (TVM's pool would otherwise take half the vCPUs: 1 on a 2-vCPU x86 VM).
    os.environ["TVM_NUM_THREADS"] = str(cores)
    runner = make_runner(knobs, target_spec.is_gpu)
    run.manifest["measure_cache"] = "warm" if target_spec.is_gpu else knobs.measure_cache  # records cannot say
    spent, stale_rounds, best_total = 0, 0, None
    if not run.tunable or budget == 0:
        return spent, "nothing-to-do"
    if not target_spec.is_gpu:  # the default schedule as each task's first record (measured), in seconds
        spent = seed_defaults(run, target_spec, budget, builder, runner, progress)
        if knobs.neighbours and knobs.space == "template" and spent < budget:
            spent += measure_neighbours(run, target_spec, budget - spent, builder, runner, progress)
            refresh(run.states, db_dir)
    console_level = logging.getLogger("tvm.s_tir.meta_schedule").level  # before MetaSchedule reconfigures it
    trials = f", {budget} trials" if budget < UNLIMITED else ""
    if ceiling := above_floor(run.states):
        progress.stage(
            "headroom",
            f"{ceiling[0]:.3g} ms of the kernels' {ceiling[1]:.3g} ms in the model is above"
            " their compute floor (FLOPs at the measured peak): the most tuning can take",
        )
    progress.stage("tune", f"{len(run.tunable)} kernels{trials}" + _time_words(knobs))
    progress.begin(_status(run, spent, budget))
    try:
        while spent < budget:
            before = {id(st): (st.trials, st.best_ms) for st in run.states}
            ran, time_up, chosen = _one_round(run, budget - spent, builder, runner, cores, console_level, progress)
            if time_up:  # no batch fits the time left
                return spent, "time"
            spent += ran
            refresh(run.states, db_dir)
            count_stalls(run.states, before, knobs.stalled_gain)
            run.save()
            progress.round(_status(run, spent, budget))
            total = _model_estimate(run)
            stale_rounds = stale_rounds + 1 if best_total and total and total >= best_total * 0.999 else 0
            best_total = total if not stale_rounds else best_total
            if knobs.early_stopping and stale_rounds >= knobs.early_stopping:
                return spent, "early-stopping"
            if ran <= 0:  # these tasks' searches made nothing new to measure: the others may still
                for st in chosen:
                    st.exhausted = True
                if not chosen or not where_time_goes(run.tunable, knobs):
                    return spent, "search space exhausted"
    except KeyboardInterrupt:
        return spent, "interrupted"
    return spent, "budget"


def _status(run: _Run, spent: int, budget: int) -> RoundStatus:
    tasks = [st.name for _, st in where_time_goes(run.tunable, run.knobs)]
    elapsed = time.time() - run.start
    return RoundStatus(
        spent,
        budget,
        elapsed,
        run.knobs.time_budget_s,
        _model_estimate(run),
        tasks,
        in_model=run.profile is not None,
        holding=holding_time(run.states),
    )


def _one_round(run: _Run, remaining: int, builder, runner, cores, console_level, progress) -> tuple[int, bool, list]:
    """(trials measured, whether the time is up: no batch fits the time left, the states of the tasks it tuned)
    for one round of `tune_tasks`. A round the deadline cut short is not the end: the next one is planned from the
    time left."""
    from tvm.s_tir import meta_schedule as ms

    knobs, db_dir = run.knobs, run.db_dir
    deadline = run.deadline
    chosen = where_time_goes(run.tunable, knobs)
    population = knobs.population
    if deadline:  # the largest search, then as many tasks, whose batches fit the time left (see deadline.py)
        predicted = [_predicted_batches(task, st, knobs, cores) for task, st in chosen]
        picked, population = deadline.plan(predicted)
        if not picked:
            return 0, True, []
        chosen = [chosen[i] for i in picked]
        deadline.fired = False
        deadline.start_round([predicted[i][population] for i in picked])
    round_trials = knobs.round_trials or knobs.num_trials_per_iter * knobs.iters_per_round * len(chosen)
    contexts, weights = round_contexts(
        chosen,
        os.path.join(db_dir, "logs"),
        console_level=console_level,
        strategy=search_strategy(knobs, population),
        num_threads=cores,
        seed=knobs.seed,
    )
    per_iter, round_budget = _round_size(round_trials, remaining, knobs.num_trials_per_iter)
    callbacks = [*ms.measure_callback.MeasureCallback.create("default"), measure_callback(progress)]
    if deadline:
        callbacks = [*callbacks, deadline.callback()]
    before = trials_in_db(db_dir)
    try:
        ms.tune.tune_tasks(
            tasks=contexts,
            task_weights=weights,
            work_dir=os.path.join(db_dir, "logs"),
            max_trials_global=round_budget,
            max_trials_per_task=knobs.max_trials_per_task,
            num_trials_per_iter=per_iter,
            builder=builder,
            runner=runner,
            database=run.db,
            cost_model=run.cost_model,
            task_scheduler="gradient",
            measure_callbacks=callbacks,
        )
    except Exception:
        if not (deadline and deadline.fired):
            raise
    return max(trials_in_db(db_dir) - before, 0), False, [st for _, st in chosen]


def _time_words(knobs: Knobs) -> str:
    return f", until {knobs.time_budget_s:.0f} s" if knobs.time_budget_s else ""


def search_strategy(knobs: Knobs, population: int | None = None):
    """The search strategy by name; evolutionary search with `population` (default: the knob)."""
    from tvm.s_tir import meta_schedule as ms

    if knobs.search != "evolutionary":
        return knobs.search
    population = population or knobs.population
    return ms.search_strategy.EvolutionarySearch(
        population_size=population, init_min_unmeasured=min(50, population // 4)
    )


def _predicted_batches(task, st, knobs: Knobs, cores: int) -> dict[int, float]:
    """{population: predicted seconds of one batch of this task} for the populations a round may use."""
    if st.candidate_s is None:
        try:
            st.candidate_s = candidate_seconds(task, st.space)
        except Exception:  # a space whose sample does not apply: assume a direct conv's cost
            st.candidate_s = 0.01
    per_iter = knobs.num_trials_per_iter
    if knobs.search != "evolutionary":  # no population: the batch's own candidates are all it draws
        return {knobs.population: batch_seconds(st.candidate_s, per_iter, per_iter, cores)}
    sizes = [p for p in POPULATIONS if p <= knobs.population] or [knobs.population]
    return {p: batch_seconds(st.candidate_s, p, per_iter, cores) for p in sizes}


def _round_size(round_trials: int, remaining: int, per_iter: int) -> tuple[int, int]:
    """(trials per iteration, trials for the round). MetaSchedule measures whole iterations and checks its global
    budget only between them, so a round is a multiple of the iteration size; the remainder is a last, smaller
    iteration. The budget is never overshot."""
    per_iter = max(1, min(per_iter, remaining))
    size = min(round_trials, remaining)
    return per_iter, max(per_iter, size - size % per_iter)


def _selected(name: str, knobs: Knobs) -> str | None:
    if knobs.only and not any(fnmatch.fnmatch(name, p) or p in name for p in knobs.only):
        return "not selected by --only"
    if any(fnmatch.fnmatch(name, p) or p in name for p in knobs.skip):
        return "excluded by --skip"
    return None


def _model_estimate(run: _Run) -> float | None:
    """What tuning minimises: the model's latency estimated from each kernel's best record and its in-model
    factor, plus the VM's own calls and the kernels tuning leaves alone as profiled; without a profile, the sum of
    the tuned kernels' best isolated time x calls."""
    states = run.states
    if run.profile is None:
        vals = [s.best_ms * s.weight for s in states if s.best_ms and not s.skipped]
        return sum(vals) if vals else None
    in_model_estimates(states)
    kernels = sum((s.estimate_ms if s.estimate_ms and not s.skipped else s.model_ms or 0.0) for s in states)
    return kernels + run.profile.other_ms
