"""Which tasks a tuning round tunes: where the model's time goes now, with diminishing returns."""

from __future__ import annotations

import statistics

from tuner.tuning.knobs import Knobs


def where_time_goes(tunable, knobs: Knobs) -> list:
    """The (task, state) pairs for the next round: not yet measured first (heaviest first), then the largest
    share of the model's time above the compute floor (`gainable`), halved for each round in a row that tuned the
    task without a gain (diminishing returns, as TVM's gradient task scheduler weighs them); tasks at
    --max-trials-per-task, or whose search made nothing to measure (`exhausted`), are done. Without the halving a
    cold light ResNet-50 spent its 10 minutes on 3 of its 28 tasks (129-193 candidates each, 2-7% better than their
    default schedules) while 25 kept theirs."""
    in_model_estimates([st for _, st in tunable])
    open_ = [
        ts
        for ts in tunable
        if not ts[1].exhausted and (not knobs.max_trials_per_task or ts[1].trials < knobs.max_trials_per_task)
    ]
    ranked = sorted(open_, key=lambda ts: (ts[1].best_ms is not None, -_rank(ts[1], knobs.min_headroom)))
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


def heaviest_first(tunable, min_headroom: float = Knobs.min_headroom) -> list:
    """(task, state) pairs by their in-model time above its compute floor when the default build was profiled,
    else FLOPs x calls: the order seeds are measured in and a small budget is spent in."""

    def key(ts):
        st = ts[1]
        return (gainable(st.model_ms or 0.0, st.floor_ms, min_headroom), st.flops * st.weight)

    return sorted(tunable, key=key, reverse=True)


def gainable(ms: float, floor_ms: float | None, min_headroom: float) -> float:
    """What tuning can still take off a kernel's `ms` in the model: the time above its compute floor (its FLOPs at
    the CPU's measured peak), never under `min_headroom` of it. The recognizer's 1x1 convs ran at 86-92% of
    peak in the model and drew 195 of a 5-minute tune's 240 trials, while its depthwise convs at 43% drew one
    each. The floor is an estimate (TVM's FLOP count, one FMA loop's peak), so no kernel ranks at zero."""
    if floor_ms is None:
        return ms
    return max(ms - floor_ms, min_headroom * ms)


def above_floor(states) -> tuple[float, float] | None:
    """(ms the tunable kernels spend in the model above their compute floors, their ms in the model): the most
    any tuning could take off the model; None without floors (no peak, or not profiled)."""
    timed = [st for st in states if st.floor_ms is not None and st.model_ms and not st.skipped]
    if not timed:
        return None
    return sum(max(0.0, st.model_ms - st.floor_ms) for st in timed), sum(st.model_ms for st in timed)


def _rank(st, min_headroom: float) -> float:
    return gainable(st.estimate_ms or 0.0, st.floor_ms, min_headroom) * 0.5**st.stalled_rounds


def count_stalls(states, before: dict, stalled_gain: float) -> None:
    """After a round: each task it tuned (its trials grew) is stalled once more unless its best time improved by
    `stalled_gain`, else its count starts again."""
    for st in states:
        trials, best = before.get(id(st), (st.trials, st.best_ms))
        if st.trials <= trials:
            continue
        gained = best is None or (st.best_ms is not None and st.best_ms < best * (1 - stalled_gain))
        st.stalled_rounds = 0 if gained else st.stalled_rounds + 1
