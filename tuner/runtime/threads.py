"""Threads for a loaded package on the CPU: no more than the process may use, and one while the cores are busy.

TVM's pool gives each parallel kernel one static share per thread and waits at the kernel's end for the last
share. When another process holds one of the cores, the thread there runs in the scheduler's time slices and
every kernel waits for it: Inception v1 (88 kernels, 13 ms on 2 idle threads) ran 30-362 ms per call beside one
busy process, and 25 ms on one thread, which the scheduler keeps on the free core (docs/performance.md). So each
Model chooses per call between the package's thread count and one thread, by what each gets now: it keeps the
faster, and tries the other now and then (after its first three calls, then after 1 s, doubling while it stays
slower, at most every 30 s), and at once when three calls in a row run 1.5x slower than the best seen. After a
switch it tries back after three calls: a short burst of other work must not hold it on one thread."""

from __future__ import annotations

import math
import os
import statistics
import threading
import time

SLOW = 1.5  # a call this much slower than the best at its thread count: something else holds a core
MARGIN = 1.1  # the other count must be this much faster to take over (no flapping on noise)
WINDOW = 3  # calls per estimate
# below this a call is not worth a try (a reconfiguration and a call on the other count): a 0.06 ms CNN flapped
# between counts on timing noise and ran 0.16 ms per call; a busy core that matters makes calls longer than this
MIN_CALL_S = 0.001
FIRST_TRY_S = 1.0
MAX_TRY_S = 30.0
ADAPTIVE_ENV = "FUSION_TUNER_ADAPTIVE_THREADS"  # "0": always the package's thread count (ablations)
# the thread count this OS thread's TVM pool is set to: the pool is per calling thread, shared by every Model the
# thread calls, so one Model's choice must not leave another on one thread unawares
_POOL = threading.local()


def usable_cpus() -> int:
    """CPUs this process may run on: its affinity mask (taskset), capped by a cgroup CPU quota (containers)."""
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 1
    quota = _cgroup_cpu_quota()
    return max(1, min(n, quota) if quota else n)


def _cgroup_cpu_quota() -> int | None:
    """CPUs' worth of time the cgroup allows (cpu.max of cgroup v2, cfs_quota/period of v1), None if unlimited."""
    candidates = (("/sys/fs/cgroup/cpu.max", None), ("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "cpu.cfs_period_us"))
    for path, period_file in candidates:
        try:
            with open(path) as f:
                fields = f.read().split()
            if period_file:
                with open(os.path.join(os.path.dirname(path), period_file)) as f:
                    fields.append(f.read().strip())
        except OSError:
            continue
        if not fields or fields[0] in ("max", "-1") or len(fields) < 2:
            return None
        try:
            return max(1, math.ceil(int(fields[0]) / int(fields[1])))
        except (ValueError, ZeroDivisionError):
            return None
    return None


class ThreadGovernor:
    """Per Model: picks the thread count of each call (`pick`), learns from its time (`record`). Calls are
    serialised by the Model's lock; the count is applied to the pool of whichever thread makes the call (TVM's
    pools are per calling thread)."""

    def __init__(self, full: int, enabled: bool = True):
        self.full = max(1, full)
        self.enabled = enabled and self.full > 1 and os.environ.get(ADAPTIVE_ENV, "1") != "0"
        self.current = self.full
        self.samples: dict[int, list[float]] = {self.full: [], 1: []}
        self.best: dict[int, float] = {}
        self.wait_s = FIRST_TRY_S
        self.next_try = time.monotonic()  # the first try as soon as the package's count has an estimate
        self.switches = 0
        self.fresh = 0  # calls on the current count since the last switch or try

    def pick(self) -> int:
        if not self.enabled:
            if getattr(_POOL, "n", self.full) != self.full:  # another Model left this thread's pool changed
                self._apply(self.full)
            return self.full
        n = self._other() if self._due() else self.current
        self._apply(n)
        return n

    def fixed(self) -> None:
        """The package's own thread count for the calling thread's pool (profiles time kernels as built)."""
        self._apply(self.full)

    def record(self, n: int, seconds: float) -> None:
        if not self.enabled:
            return
        recent = self.samples[n]
        recent.append(seconds)
        del recent[:-WINDOW]
        self.best[n] = min(seconds, self.best.get(n, seconds))
        now = time.monotonic()
        if n != self.current:  # a try of the other count
            self.fresh = 0
            if seconds * MARGIN < self._estimate(self.current):
                # switch, and try back after a few calls: a burst of someone else's work (ONNX Runtime's
                # spinning threads between a benchmark's blocks) must not keep a package on one thread for long
                back_to_full = n == self.full
                self.current, self.wait_s = n, FIRST_TRY_S
                self.next_try = now + FIRST_TRY_S if back_to_full else now
                self.switches += 1
            else:
                self.wait_s = min(2 * self.wait_s, MAX_TRY_S)
                self.next_try = now + self.wait_s
            return
        self.fresh += 1
        if self.fresh >= WINDOW and min(recent) > max(SLOW * self.best[n], MIN_CALL_S):
            self.next_try = now  # three slow calls in a row: the cores changed; try the other count now

    def describe(self) -> dict:
        return {"threads": self.full, "now": self.current, "adaptive": self.enabled, "switches": self.switches}

    def _due(self) -> bool:
        recent = self.samples[self.current]
        if self.fresh < WINDOW or time.monotonic() < self.next_try:
            return False
        return self.current != self.full or max(recent) >= MIN_CALL_S

    def _other(self) -> int:
        return 1 if self.current == self.full else self.full

    def _estimate(self, n: int) -> float:
        return statistics.median(self.samples[n]) if self.samples[n] else float("inf")

    def _apply(self, n: int) -> None:
        # a pool starts with the package's count, as TVM configured it: reconfiguring it to the same count re-pins
        # its threads (kBig) and cost a 0.06 ms CNN 17% of its calls per second, so only a change is applied
        if getattr(_POOL, "n", self.full) == n:
            return
        import tvm

        # kBig (1): the pool's own affinity mode; only the count changes (~30 us, no threads created)
        tvm.get_global_func("runtime.config_threadpool")(1, n, [])
        _POOL.n = n
