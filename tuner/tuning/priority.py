"""Which tasks a tuning round tunes: where the model's time goes now, with diminishing returns."""

from __future__ import annotations

import statistics

from tuner.tuning.knobs import Knobs


def where_time_goes(tunable, knobs: Knobs) -> list:
    """The (task, state) pairs for the next round: not yet measured first (heaviest first), then the largest
    share of the model's time (`in_model_estimates`), halved for each round in a row that tuned the task without
    a gain (diminishing returns, as TVM's gradient task scheduler weighs them); tasks at --max-trials-per-task, or
    whose search made nothing to measure (`exhausted`), are done. Without the halving a cold light ResNet-50 spent
    its 10 minutes on 3 of its 28 tasks (129-193 candidates each, 2-7% better than their default schedules) while
    25 kept theirs."""
    in_model_estimates([st for _, st in tunable])
    open_ = [
        ts
        for ts in tunable
        if not ts[1].exhausted and (not knobs.max_trials_per_task or ts[1].trials < knobs.max_trials_per_task)
    ]
    ranked = sorted(open_, key=lambda ts: (ts[1].best_ms is not None, -_rank(ts[1])))
    return ranked[: max(1, knobs.tasks_per_round)]


def in_model_estimates(states) -> None:
    """Set each state's `estimate_ms`, its share of the model's latency with its best record: best isolated ms x
    calls x its in-model factor (the default build's profile over the default schedule's isolated time). A task
    without a factor of its own (its default was not measured in this run: a warm start, a resume) takes the
    median factor of those that have one; without a profile, the factor is 1 (the isolated time x calls)."""
    known = [st.in_model_factor for st in states if st.in_model_factor is not None]
    fallback = statistics.median(known) if known else 1.0
    for st in states:
        factor = st.in_model_factor if st.in_model_factor is not None else fallback
        st.estimate_ms = st.best_ms * st.weight * factor if st.best_ms else None


def holding_time(states, n: int = 3) -> list[tuple[str, float, float]]:
    """[(kernel, estimated ms in the model, share of the tuned kernels' estimated time)] for the `n` kernels
    that hold the most of it now: what the live display and --json say tuning is working against."""
    in_model_estimates(states)
    timed = [st for st in states if st.estimate_ms and not st.skipped]
    total = sum(st.estimate_ms for st in timed)
    top = sorted(timed, key=lambda st: -st.estimate_ms)[:n]
    return [(st.name, st.estimate_ms, st.estimate_ms / total) for st in top] if total else []


def heaviest_first(tunable) -> list:
    """(task, state) pairs by their in-model time when the default build was profiled, else FLOPs x calls:
    the order seeds are measured in and a small budget is spent in."""
    return sorted(tunable, key=lambda ts: (ts[1].model_ms or 0.0, ts[1].flops * ts[1].weight), reverse=True)


def _rank(st) -> float:
    return (st.estimate_ms or 0) * 0.5**st.stalled_rounds


def count_stalls(states, before: dict, stalled_gain: float) -> None:
    """After a round: each task it tuned (its trials grew) is stalled once more unless its best time improved by
    `stalled_gain`, else its count starts again."""
    for st in states:
        trials, best = before.get(id(st), (st.trials, st.best_ms))
        if st.trials <= trials:
            continue
        gained = best is None or (st.best_ms is not None and st.best_ms < best * (1 - stalled_gain))
        st.stalled_rounds = 0 if gained else st.stalled_rounds + 1
