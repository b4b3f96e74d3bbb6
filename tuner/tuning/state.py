"""What tuning reports: each task's state (trials, best latency, why it is skipped) and a run's result."""

from __future__ import annotations

from dataclasses import dataclass, field

from tuner.tuning.database.warm_start import WarmStart


@dataclass
class TaskState:
    name: str
    flops: float
    weight: int
    workload_hash: str
    trials: int = 0
    best_ms: float | None = None
    skipped: str | None = None  # why it is not tuned
    space: object = None  # the design space it is tuned in (set by with_design_space)
    note: str | None = None  # e.g. tuned in a reduced design space
    stalled_rounds: int = 0  # rounds in a row that tuned it without a gain (see priority.where_time_goes)
    exhausted: bool = False  # a round of it measured nothing: its search makes no new candidate (loop._rounds)
    candidate_s: float | None = None  # seconds one search candidate costs (search_cost.candidate_seconds)
    model_ms: float | None = None  # its kernels' time in one inference of the default build (model_profile.py)
    default_ms: float | None = None  # its default schedule's time alone (the seed record), when seeded this run
    estimate_ms: float | None = None  # its share of the model's latency now (priority.in_model_estimates)
    floor_ms: float | None = None  # its FLOPs x calls at the CPU's measured peak: no schedule runs it faster

    @property
    def in_model_factor(self) -> float | None:
        """How much slower the model runs this kernel than the runner does: in-model time over the default
        schedule's isolated time x calls (cache misses after other layers, data-dependent speed)."""
        if self.model_ms is None or not self.default_ms:
            return None
        return self.model_ms / (self.default_ms * self.weight)

    @property
    def peak_share(self) -> float | None:
        """How close the default build ran this kernel to the compute peak in the model (its floor over its
        in-model time): 0.9 leaves tuning a tenth of its time at most."""
        if self.floor_ms is None or not self.model_ms:
            return None
        return self.floor_ms / self.model_ms

    @property
    def gflops(self) -> float | None:
        return self.flops / (self.best_ms * 1e-3) / 1e9 if self.best_ms and self.flops else None

    def to_json(self):
        return {
            "task": self.name,
            "flops": self.flops,
            "weight": self.weight,
            "trials": self.trials,
            "best_ms": self.best_ms,
            "gflops": self.gflops,
            "skipped": self.skipped,
            "note": self.note,
            "workload_hash": self.workload_hash,
            "model_ms": self.model_ms,
            "default_ms": self.default_ms,
            "in_model_factor": self.in_model_factor,
            "estimate_ms": self.estimate_ms,
            "floor_ms": self.floor_ms,
            "peak_share": self.peak_share,
        }


@dataclass
class TuneResult:
    db_dir: str
    tasks: list[TaskState]
    trials_this_run: int
    trials_total: int
    wall_s: float
    stopped: str  # budget | time | early-stopping | interrupted | nothing-to-do
    shared_workloads: int = 0
    repairs: list = field(default_factory=list)
    warm: WarmStart | None = None


def trials_in_db(db_dir) -> int:
    """Candidates measured into the database at `db_dir` (the files, not a counter we keep)."""
    from tuner.tuning.database import store as D

    return sum(c["trials"] for c in D.record_counts(db_dir).values())


def refresh(states, db_dir) -> None:
    """Each state's trials and best time from the database at `db_dir`."""
    from tuner.tuning.database import store as D

    hashes, counts = D.workload_hashes(db_dir), D.record_counts(db_dir)
    for st in states:
        if st.workload_hash in hashes:
            c = counts.get(hashes.index(st.workload_hash), {})
            st.trials = c.get("trials", 0)
            st.best_ms = c["best_s"] * 1e3 if c.get("best_s") else None
