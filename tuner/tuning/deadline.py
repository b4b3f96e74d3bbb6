"""A time budget that acts inside a round: MetaSchedule measures in batches of `num_trials_per_iter`, and after
each batch (its records already committed by the default callbacks, which run first) this callback ends
`tune_tasks` once the time is spent, by terminating every task: the scheduler then joins the batches still in
flight, commits them, and returns. Rounds can be long (one round is several iterations per task), so checking
only between rounds let a 20-second budget run for 70 seconds."""

from __future__ import annotations

import time


class Deadline:
    """`callback()` is a MetaSchedule measure callback that ends the round after the batch that crosses `at`
    (time.time()); `fired` says whether it did."""

    def __init__(self, at: float):
        self.at = at
        self.fired = False

    def callback(self):
        from tvm.ir.utils import derived_object
        from tvm.s_tir import meta_schedule as ms

        owner = self

        @derived_object
        class _Deadline(ms.measure_callback.PyMeasureCallback):
            def apply(self, task_scheduler, task_id, measure_candidates, builder_results, runner_results) -> None:
                if time.time() < owner.at or owner.fired:
                    return
                owner.fired = True
                # end every task: the scheduler picks none again, joins what is in flight (those records are
                # committed too) and returns
                for i in range(len(task_scheduler.tasks_)):
                    if not task_scheduler.tasks_[i].is_terminated:
                        task_scheduler.terminate_task(i)

        return _Deadline()
