"""Every tuning knob in one place."""

from __future__ import annotations

from dataclasses import dataclass

UNLIMITED = 10**9  # trials when only a time budget is given: tune until the time is spent


@dataclass(frozen=True)
class Knobs:
    """Every tuning knob in one place."""

    trials: int = 64  # total for the model, over all tasks
    max_trials_per_task: int | None = None
    # candidates measured per search iteration; None: `per_iteration` decides. Each iteration pays one evolutionary
    # search (~10 s for a conv on 2 cores, population 512), so larger batches measure more per second: on magika,
    # 4 minutes measured 162 candidates in batches of 8 and 392 in batches of 32 (kernel-time estimate 4.74 vs 4.28 ms)
    num_trials_per_iter: int | None = None
    round_trials: int | None = None  # default: iters_per_round iterations of each task in the round
    tasks_per_round: int = 4  # the tasks where the time goes now (see priority.where_time_goes)
    iters_per_round: int = 2
    # a task whose round improved it by less than this counts as stalled; each stalled round halves its rank
    stalled_gain: float = 0.01
    time_budget_s: float | None = None
    early_stopping: int | None = None  # stop after this many rounds without improvement
    trivial_flops: float = 4e3  # below this a kernel keeps its default schedule
    cost_model: str = "xgb"  # xgb | random
    search: str = "evolutionary"  # evolutionary | replay-trace
    population: int = 512  # evolutionary search: candidates evolved per iteration (MetaSchedule's default)
    seed: int | None = None
    only: tuple = ()
    skip: tuple = ()
    builder_timeout_s: float = 60.0
    runner_timeout_s: float = 30.0
    # how CPU candidates are timed: warm (MetaSchedule's default: back-to-back calls, caches hot) or flush (one call
    # after each flush of the kernel's weights and output, its input kept, as a model run leaves them). Light
    # ResNet-50's kernels ran between the two in the model (5-40% above warm), but a cold 10-minute tune with flush
    # was no faster in the model than one with warm (tuned/untuned 1.03 and 1.02): warm stays the default
    measure_cache: str = "warm"  # warm | flush
    measure_repeats: int = 10  # timed calls per candidate when flushing (one call per flush)
    # how tasks are ranked for the budget: headroom (as model, less each kernel's compute floor: its FLOPs at the
    # CPU's measured peak; priority.gainable), model (the default build profiled in the model with its own
    # constants, each task's best record scaled by how much slower the model runs it; tuning/model_profile.py) or
    # alone (isolated best time x calls, MetaSchedule's view)
    rank: str = "headroom"
    min_headroom: float = 0.1  # a kernel ranks by at least this share of its time, however near the floor
    # the design space of CPU tasks: template (the default schedule's own space first: the search starts at the
    # default and mutates it; schedule/default_schedule.template_space) or tvm (TVM's llvm space)
    space: str = "template"
    # before the search, the default schedule's neighbours (its recipe's knobs moved one at a time) measured for the
    # kernels with the most time above their floor (tuning/neighbours.py)
    neighbours: bool = True
    rpc: str | None = None  # TRACKER_HOST:PORT:KEY: measure on remote devices (a GPU box) instead of here


def per_iteration(knobs: Knobs, budget: int, tasks: int) -> int:
    """Candidates per search iteration: as set, or 32 when time is the budget, and for a trial budget as many as
    give every task one iteration, between 8 and 32."""
    if knobs.num_trials_per_iter:
        return knobs.num_trials_per_iter
    if budget >= UNLIMITED:
        return 32
    return max(8, min(32, budget // max(tasks, 1)))
