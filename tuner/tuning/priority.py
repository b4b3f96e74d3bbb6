"""Which tasks a tuning round tunes: where the model's time goes now, with diminishing returns."""

from __future__ import annotations

from tuner.tuning.knobs import Knobs


def where_time_goes(tunable, knobs: Knobs) -> list:
    """The (task, state) pairs for the next round: not yet measured first (heaviest first), then the largest
    share of the model's time (best ms x calls), halved for each round in a row that tuned the task without a gain
    (diminishing returns, as TVM's gradient task scheduler weighs them); tasks at --max-trials-per-task are done.
    Without the halving a cold light ResNet-50 spent its 10 minutes on 3 of its 28 tasks (129-193 candidates each,
    2-7% better than their default schedules) while 25 kept theirs."""
    open_ = [ts for ts in tunable if not knobs.max_trials_per_task or ts[1].trials < knobs.max_trials_per_task]
    ranked = sorted(open_, key=lambda ts: (ts[1].best_ms is not None, -_rank(ts[1])))
    return ranked[: max(1, knobs.tasks_per_round)]


def _rank(st) -> float:
    return (st.best_ms or 0) * st.weight * 0.5**st.stalled_rounds


def count_stalls(states, before: dict, stalled_gain: float) -> None:
    """After a round: each task it tuned (its trials grew) is stalled once more unless its best time improved by
    `stalled_gain`, else its count starts again."""
    for st in states:
        trials, best = before.get(id(st), (st.trials, st.best_ms))
        if st.trials <= trials:
            continue
        gained = best is None or (st.best_ms is not None and st.best_ms < best * (1 - stalled_gain))
        st.stalled_rounds = 0 if gained else st.stalled_rounds + 1
