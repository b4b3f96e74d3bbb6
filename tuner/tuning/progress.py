"""What a tuning run reports while it works, as events; the CLI draws them (tuner/cli/progress.py).

    stage(name, detail)   a step of tune-model begins: import, reference, seed, tune, build, time, verify
    begin(status)         tuning begins (after the seeds): the budget, and the seeds' kernel-time estimate
    trials(n)             n more candidates measured (after every MetaSchedule batch, inside a round)
    round(status)         a round ended: trials and time against the budget, the kernel-time estimate

`Progress` itself ignores every event: code that tunes calls it unconditionally.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class RoundStatus:
    spent: int  # trials this run
    budget: int  # trial budget of this run
    elapsed_s: float
    time_budget_s: float | None
    # what tuning minimises: the model's latency estimated from the in-model profile and the best records
    # (`in_model`), or, without a profile, the sum over kernels of best isolated time x calls
    estimate_ms: float | None
    tasks: list = field(default_factory=list)  # the kernels the next round tunes (where the time goes)
    in_model: bool = False
    holding: list = field(default_factory=list)  # [(kernel, estimated ms in the model, share)]: priority.holding_time


class Progress:
    """The no-op reporter. `reference_ms`: ONNX Runtime's latency when tune-model measured it first."""

    reference_ms: float | None = None

    def stage(self, name: str, detail: str = "") -> None:
        pass

    def begin(self, status: RoundStatus) -> None:
        pass

    def trials(self, n: int) -> None:
        pass

    def round(self, status: RoundStatus) -> None:
        pass

    def close(self) -> None:
        pass


def measure_callback(progress: Progress):
    """A MetaSchedule measure callback that reports every measured batch."""
    from tvm.ir.utils import derived_object
    from tvm.s_tir import meta_schedule as ms

    @derived_object
    class _Reported(ms.measure_callback.PyMeasureCallback):
        def apply(self, task_scheduler, task_id, measure_candidates, builder_results, runner_results) -> None:
            progress.trials(len(runner_results))

    return _Reported()
