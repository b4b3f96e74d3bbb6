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


def _cgroup_cpu_quota(root: str = "/sys/fs/cgroup", membership: str = "/proc/self/cgroup") -> int | None:
    """CPUs' worth of time this process's cgroup allows, None if unlimited: the smallest quota on the path from the
    process's own cgroup up to the root (a quota on a parent limits its children: systemd's CPUQuota= sits on the
    service's cgroup, a container's on its own). cgroup v2 `cpu.max`; v1 `cpu.cfs_quota_us` / `cpu.cfs_period_us`."""
    v2, v1 = "/", None
    try:
        with open(membership) as f:
            for line in f:  # "0::/path" (v2), "4:cpu,cpuacct:/path" (v1)
                _, controllers, path = line.rstrip("\n").split(":", 2)
                if controllers == "":
                    v2 = path
                elif "cpu" in controllers.split(","):
                    v1 = (controllers, path)
    except (OSError, ValueError):
        pass
    limits = []
    for d in _ancestors(root, v2):
        fields = _read_fields(os.path.join(d, "cpu.max"))
        if len(fields) >= 2 and fields[0] != "max":
            limits.append((fields[0], fields[1]))
    if v1 is not None:
        for mount in (v1[0], "cpu", "cpu,cpuacct"):
            base = os.path.join(root, mount)
            if os.path.isdir(base):
                for d in _ancestors(base, v1[1]):
                    quota = _read_fields(os.path.join(d, "cpu.cfs_quota_us"))
                    period = _read_fields(os.path.join(d, "cpu.cfs_period_us"))
                    if quota and period and quota[0] != "-1":
                        limits.append((quota[0], period[0]))
                break
    cpus = []
    for quota, period in limits:
        try:
            cpus.append(max(1, math.ceil(int(quota) / int(period))))
        except (ValueError, ZeroDivisionError):
            continue
    return min(cpus) if cpus else None


def _ancestors(base: str, path: str) -> list[str]:
    """`base/path`, its parents, up to `base` (a path the mount does not show, as inside a cgroup namespace, falls
    back to `base` itself)."""
    parts = [p for p in path.split("/") if p and p != ".."]
    dirs = [os.path.join(base, *parts[:k]) for k in range(len(parts), -1, -1)]
    return [d for d in dirs if os.path.isdir(d)] or [base]


def _read_fields(path: str) -> list[str]:
    try:
        with open(path) as f:
            return f.read().split()
    except OSError:
        return []


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
