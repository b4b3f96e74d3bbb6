"""A time budget that acts inside a round: MetaSchedule measures in batches of `num_trials_per_iter`, and after
each batch (its records already committed by the default callbacks, which run first) this callback ends
`tune_tasks` once the time is spent. Rounds can be long (one round is several iterations per task), so checking
only between rounds let a 20-second budget run for 70 seconds."""

from __future__ import annotations

import time


class Deadline:
    """`callback()` is a MetaSchedule measure callback that raises after the batch that crosses `at`
    (time.time()); `fired` says whether it did (the exception comes back through TVM's FFI as a plain
    RuntimeError, so the caller asks this object rather than the exception)."""

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
                if time.time() >= owner.at:
                    owner.fired = True
                    raise TimeoutError("tuning time budget spent")

        return _Deadline()
