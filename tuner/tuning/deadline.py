"""A time budget that acts inside a round, and ends the run *before* the time is spent rather than after.

MetaSchedule measures in batches of `num_trials_per_iter`: search a batch, build it, run it. Nothing can stop a
batch once started (the search is C++), so a budget checked after each batch overshoots by up to one batch: on
2 cores a batch of large convolutions takes 30-110 s. The deadline therefore keeps the time a batch takes (the
interval between consecutive measured batches, smoothed) and stops when the *next* batch would end past the
budget. The check runs as a measure callback after each batch (its records already committed by the default
callbacks, which run first); it ends `tune_tasks` by terminating every task: the scheduler then joins the
batches still in flight, commits them, and returns."""

from __future__ import annotations

import time


class Deadline:
    """The time budget, ending at `at` (time.time()). `expired()` says whether another batch fits; `callback()` is
    the measure callback that ends a round once it does not; `fired` says whether it did."""

    def __init__(self, at: float, clock=time.time):
        self.at = at
        self.fired = False
        self.batch_s = 0.0  # the expected time of the next batch: 0 until one has been seen
        self._clock = clock
        self._last = None

    def start_round(self) -> None:
        """A round begins: its design spaces and first search count towards its first batch."""
        self._last = self._clock()

    def batch_done(self) -> None:
        now = self._clock()
        if self._last is not None:
            took = now - self._last
            # smoothed so that one slow batch (a large kernel's builds) does not end the run early by itself
            self.batch_s = took if not self.batch_s else 0.5 * (self.batch_s + took)
        self._last = now

    def expired(self) -> bool:
        return self._clock() + self.batch_s >= self.at

    def callback(self):
        from tvm.ir.utils import derived_object
        from tvm.s_tir import meta_schedule as ms

        owner = self

        @derived_object
        class _Deadline(ms.measure_callback.PyMeasureCallback):
            def apply(self, task_scheduler, task_id, measure_candidates, builder_results, runner_results) -> None:
                owner.batch_done()
                if owner.fired or not owner.expired():
                    return
                owner.fired = True
                # end every task: the scheduler picks none again, joins what is in flight (those records are
                # committed too) and returns
                for i in range(len(task_scheduler.tasks_)):
                    if not task_scheduler.tasks_[i].is_terminated:
                        task_scheduler.terminate_task(i)

        return _Deadline()
