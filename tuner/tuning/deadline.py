"""A time budget that acts inside a round, and ends the run *before* the time is spent rather than after.

MetaSchedule measures in batches: search a task's candidates, build them, run them. Nothing can stop a batch
once started (the search is C++), and the gradient task scheduler starts a round with one batch of *every* task
before it joins any (round robin): measure callbacks arrive only after all of them, in a burst. Checking the
clock after each batch therefore let a 30-second budget tune for 258 s (4 tasks x ~60 s of search and builds on
a busy 2-core machine), and 10-minute budgets run 605-712 s.

So no batch starts that is expected to end past the budget. Each task's batch is predicted before it starts
(`search_cost`: its search cost per candidate, probed, times the population), and the predictions are calibrated
by what batches really took (`scale`: observed over predicted, smoothed). A round gets its most important task
that fits the time left, at the largest population that fits, and the others that fit beside it (`plan`; none:
the run stops); the first round under a time budget starts one task, to calibrate before committing to a round
robin. After each batch a measure callback (its records already committed by the default callbacks, which run
first) ends `tune_tasks` when the round's costliest batch would not fit, by terminating every task: the scheduler
then joins the batches still in flight, commits them, and returns, and the next round is planned from the time
left."""

from __future__ import annotations

import time


class Deadline:
    """The time budget, ending at `at` (time.time()). `plan` sizes a round, `expired()` says whether another batch of
    the round fits; `callback()` is the measure callback that ends a round once it does not; `fired` says whether
    it did."""

    def __init__(self, at: float, clock=time.time):
        self.at = at
        self.fired = False
        self.scale = 1.0  # observed / predicted batch time
        self.calibrated = False
        self._clock = clock
        self._last = None
        self._round = [0.0]  # predicted seconds of one batch of each task of the round (unscaled)
        self._seen = 0  # batches joined in this round

    def left(self) -> float:
        return self.at - self._clock()

    def plan(self, predicted: list[dict[int, float]]) -> tuple[list[int], int]:
        """(the tasks, by index, and the population) for a round starting now, from each candidate task's predicted
        batch seconds by population, in priority order: the first task that fits at any population, at the largest
        that fits, then (once calibrated) every other task that fits beside it at that population. ([], _) when
        no batch fits: time is up."""
        left = self.left()
        for first, batches in enumerate(predicted):
            fitting = [p for p in sorted(batches, reverse=True) if self.scale * batches[p] <= left]
            if not fitting:
                continue  # too costly for the time left: a cheaper task may still use it
            population, total, chosen = fitting[0], batches[fitting[0]], [first]
            for i in range(first + 1, len(predicted) if self.calibrated else first + 1):
                if self.scale * (total + predicted[i][population]) <= left:  # every task has the same sizes
                    total += predicted[i][population]
                    chosen.append(i)
            return chosen, population
        return [], 0

    def start_round(self, predicted_s: list[float]) -> None:
        """A round begins with the chosen tasks' predicted batch seconds (unscaled), in the order of its tasks."""
        self._last, self._seen = self._clock(), 0
        self._round = list(predicted_s) or [0.0]

    def batch_done(self, task_id: int | None = None) -> None:
        """A batch of the round's task `task_id` was joined."""
        now = self._clock()
        self._seen += 1
        if self._seen == 1:  # the round robin: every task searched and built before this first join
            self._learn(now - self._last, sum(self._round))
        elif self._seen > len(self._round):  # one batch since the last join: the one just joined
            known = task_id is not None and 0 <= task_id < len(self._round)
            self._learn(now - self._last, self._round[task_id] if known else sum(self._round) / len(self._round))
        self._last = now  # (the rest of the round robin's burst joins batches that already ran)

    def _learn(self, took: float, predicted: float) -> None:
        if predicted <= 0:
            return
        # smoothed so that one slow batch does not end the run early by itself
        ratio = took / predicted
        self.scale = ratio if not self.calibrated else 0.5 * (self.scale + ratio)
        self.calibrated = True

    def expired(self) -> bool:
        """Could the round's next batch end past the budget? The task scheduler picks it after this check, so it
        is judged by the round's costliest (a round of Winograd and direct convs ran a 10-minute budget 32 s over
        when judged by their mean); the next round is planned afresh from the time left."""
        return self._clock() + self.scale * max(self._round) >= self.at

    def callback(self):
        from tvm.ir.utils import derived_object
        from tvm.s_tir import meta_schedule as ms

        owner = self

        @derived_object
        class _Deadline(ms.measure_callback.PyMeasureCallback):
            def apply(self, task_scheduler, task_id, measure_candidates, builder_results, runner_results) -> None:
                owner.batch_done(task_id)
                if owner.fired or not owner.expired():
                    return
                owner.fired = True
                # end every task: the scheduler picks none again, joins what is in flight (those records are
                # committed too) and returns
                for i in range(len(task_scheduler.tasks_)):
                    if not task_scheduler.tasks_[i].is_terminated:
                        task_scheduler.terminate_task(i)

        return _Deadline()
