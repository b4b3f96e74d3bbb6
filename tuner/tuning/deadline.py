"""A time budget that acts inside a round, and ends the run *before* the time is spent rather than after.

MetaSchedule measures in batches: search a task's candidates, build them, run them. Nothing can stop a batch
once started (the search is C++), and the gradient task scheduler starts a round with one batch of *every* task
before it joins any (round robin): measure callbacks arrive only after all of them, in a burst. Checking the
clock after each batch therefore let a 30-second budget tune for 258 s (4 tasks x ~60 s of search and builds on
a busy 2-core machine), and 10-minute budgets run 605-712 s.

So the deadline keeps how long one task's batch takes (the round robin's time divided by its tasks, then the
interval between consecutive batches; smoothed), stops when the *next* batch would end past the budget, and
says how many tasks a new round can start (`fits`): the first round under a time budget starts one task, to
learn the batch time before committing to a round robin. The check runs as a measure callback after each batch
(its records already committed by the default callbacks, which run first); it ends `tune_tasks` by terminating
every task: the scheduler then joins the batches still in flight, commits them, and returns."""

from __future__ import annotations

import time


class Deadline:
    """The time budget, ending at `at` (time.time()). `expired()` says whether another batch fits; `callback()` is
    the measure callback that ends a round once it does not; `fired` says whether it did."""

    def __init__(self, at: float, clock=time.time):
        self.at = at
        self.fired = False
        self.batch_s = 0.0  # the expected time of one task's batch: 0 until one has been seen
        self._clock = clock
        self._last = None
        self._round_tasks = 1
        self._seen = 0  # batches joined in this round

    def fits(self, tasks: int) -> int:
        """How many tasks a round starting now can give their first batch (at least 1)."""
        if not self.batch_s:
            return 1  # nothing measured yet: learn the batch time on one task
        return max(1, min(tasks, int((self.at - self._clock()) / self.batch_s)))

    def start_round(self, tasks: int = 1) -> None:
        """A round of `tasks` tasks begins: its design spaces and searches count towards its first batches."""
        self._last, self._round_tasks, self._seen = self._clock(), max(1, tasks), 0

    def batch_done(self) -> None:
        now = self._clock()
        self._seen += 1
        if self._seen == 1:  # the round robin: every task searched and built before this first join
            self._learn((now - self._last) / self._round_tasks)
        elif self._seen > self._round_tasks:  # one batch since the last join
            self._learn(now - self._last)
        self._last = now  # (the rest of the round robin's burst joins batches that already ran)

    def _learn(self, took: float) -> None:
        # smoothed so that one slow batch (a large kernel's builds) does not end the run early by itself
        self.batch_s = took if not self.batch_s else 0.5 * (self.batch_s + took)

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
