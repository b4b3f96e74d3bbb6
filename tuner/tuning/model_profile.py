"""Where the model's time goes, kernel by kernel, before tuning: the tuner's map of what is worth its budget.

A task's isolated time (MetaSchedule's runner: random data, the kernel called back to back, its weights hot in
cache) is not its share of the model's latency. In the model the layers before it have pushed its weights out of
cache, and its speed can depend on the data (subnormal weights cost a microcode assist per multiply on Intel
cores: the issue's text detector spent 64% of its time in one conv that ranked under 1 ms alone). So tune-model
runs the default build once with the model's own constants under the VM's per-call profile, and each task carries
its in-model time. The ranking (priority.py) scales a task's measured best by how much slower the model runs it
than the runner does (`TaskState.in_model_factor`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tuner.core.ir import PACKED

RUNS = 5  # inferences profiled (median per call symbol) after a warm-up


@dataclass
class ModelProfile:
    """One inference of the default build, profiled and scaled to its plain latency (`calibrated`): ms per
    workload (a task's kernels summed over their calls), ms in the VM's own calls (allocation, shape checks), and
    the kernels' names per workload."""

    ms_by_workload: dict[str, float] = field(default_factory=dict)
    kernels_by_workload: dict[str, list[str]] = field(default_factory=dict)
    other_ms: float = 0.0
    calls_by_workload: dict[str, int] = field(default_factory=dict)  # calls per inference, for `calibrated`
    other_calls: int = 0
    profiled_ms: float | None = None  # the hook's own total before calibration (see `calibrated`)
    # the CPU's float32 peak on the model's threads (report/peak.cpu_peak), for each kernel's compute floor
    peak_gflops: float | None = None
    peak_how: str | None = None

    @property
    def kernels_ms(self) -> float:
        return sum(self.ms_by_workload.values())

    @property
    def total_ms(self) -> float:
        return self.kernels_ms + self.other_ms

    def heaviest(self, n: int = 3) -> list[tuple[str, float, float]]:
        """[(a kernel of the workload, ms, share of the inference)] for the `n` workloads that take the most."""
        top = sorted(self.ms_by_workload.items(), key=lambda kv: -kv[1])[:n]
        total = self.total_ms or 1.0
        return [(self.kernels_by_workload[h][0], ms, ms / total) for h, ms in top]

    def words(self) -> str:
        """ "52.4 ms per inference (VM's own calls 1.0 ms); most in conv2d_winograd31 12%, ..." """
        most = ", ".join(f"{name} {share:.0%}" for name, _, share in self.heaviest())
        peak = f"; compute peak {self.peak_gflops:.0f} GFLOP/s" if self.peak_gflops else ""
        return f"{self.total_ms:.2f} ms per inference (the VM's own calls {self.other_ms:.2f} ms); most in {most}{peak}"

    def floor_ms(self, flops: float) -> float | None:
        """The least time `flops` can take at the measured peak; None without a peak."""
        return flops / self.peak_gflops / 1e6 if self.peak_gflops else None

    def to_json(self, states=()) -> dict:
        """The profile for tune-model's --json: totals and each task's in-model time, heaviest first."""
        names = {st.workload_hash: st.name for st in states}
        rows = sorted(self.ms_by_workload.items(), key=lambda kv: -kv[1])
        return {
            "total_ms": self.total_ms,
            "kernels_ms": self.kernels_ms,
            "vm_calls_ms": self.other_ms,
            "profiled_ms": self.profiled_ms,
            "peak_gflops": self.peak_gflops,
            "peak_how": self.peak_how,
            "tasks": [
                {"task": names.get(h), "kernels": self.kernels_by_workload[h], "ms": ms, "share": ms / self.total_ms}
                for h, ms in rows
            ],
        }


def workload_hashes(mod) -> dict[str, str]:
    """{kernel name: the structural hash MetaSchedule's task extraction gives its workload}: the PrimFunc as the
    module `main` of its own IRModule, as `extract_tasks` dispatches it, so a kernel and its task meet by hash."""
    import tvm
    import tvm_ffi

    from tuner.core.ir import primfuncs

    return {
        name: str(tvm_ffi.structural_hash(tvm.IRModule({"main": f.with_attr("global_symbol", "main")})))
        for name, f in primfuncs(mod).items()
    }


def profile_model(mod, executable, feed: list, runs: int = RUNS) -> ModelProfile:
    """Profile `executable` (built from the fused module `mod`) on `feed` and add each call's time to the
    workload of the kernel it ran; calls that are not kernels of `mod` are the VM's own."""
    import tvm
    from tvm.runtime.vm import VirtualMachine

    from tuner.runtime.profile import profile_calls

    device = tvm.cpu()
    args = [tvm.runtime.tensor(a, device) for a in feed]
    plain = VirtualMachine(executable, device)  # its own VM: the profiled one keeps a (no-op) hook per call
    latency = _latency_ms(lambda: plain["main"](*args))
    vm = VirtualMachine(executable, device)
    profile = attribute(profile_calls(vm, device, lambda: vm["main"](*args), runs), workload_hashes(mod))
    return calibrated(profile, latency)


def calibrated(profile: ModelProfile, latency_ms: float) -> ModelProfile:
    """The profile made to total the model's latency run without the hook. Profiled slower than the plain run: the
    hook's Python call and sync around each call let the thread pool's workers go idle, which the model's own
    back-to-back run does not (a small CNN profiled at 0.16 ms per inference and ran at 0.09). That cost comes per
    call, so each call gives back an equal share of the difference (never more than `KEEP_AT_LEAST` of its time),
    then every call is scaled alike to close what is left. Scaling by time alone took the recognizer's heaviest
    convs down with the small kernels' gaps: they read 101-114% of the CPU's peak where `run --profile` measured
    86-92%. Profiled faster: the time between the hook's windows (the VM dispatching its instructions) is the VM's
    own. The ranking needs shares, and the estimate shown beside ONNX Runtime must be a latency."""
    raw = profile.total_ms
    if raw <= 0 or latency_ms <= 0:
        return profile
    profile.profiled_ms = raw
    if latency_ms >= raw:
        profile.other_ms += latency_ms - raw
        return profile
    gap = (raw - latency_ms) / max(1, sum(profile.calls_by_workload.values()) + profile.other_calls)

    def less_gaps(ms, calls):
        return max(ms - calls * gap, KEEP_AT_LEAST * ms)

    kernels = {h: less_gaps(ms, profile.calls_by_workload.get(h, 1)) for h, ms in profile.ms_by_workload.items()}
    other = less_gaps(profile.other_ms, profile.other_calls)
    scale = latency_ms / ((sum(kernels.values()) + other) or 1.0)
    profile.ms_by_workload = {h: ms * scale for h, ms in kernels.items()}
    profile.other_ms = other * scale
    return profile


KEEP_AT_LEAST = 0.25  # of a call's profiled time, whatever the per-call gap


def _latency_ms(call, min_runs: int = 10, min_s: float = 0.3) -> float:
    """Median ms of back-to-back calls after a warm-up: at least `min_runs` and `min_s` seconds."""
    import statistics
    import time

    call()
    samples, start = [], time.perf_counter()
    while len(samples) < min_runs or time.perf_counter() - start < min_s:
        t0 = time.perf_counter()
        call()
        samples.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(samples)


def attribute(calls: dict[str, dict], hashes: dict[str, str]) -> ModelProfile:
    """A profile (`profile_calls`' {symbol: {"total_us", ...}}) summed per workload hash."""
    profile = ModelProfile()
    for symbol, row in calls.items():
        name = symbol.removesuffix(PACKED)
        ms, calls = row["total_us"] / 1e3, int(row.get("calls", 1))
        if name not in hashes:
            profile.other_ms += ms
            profile.other_calls += calls
            continue
        h = hashes[name]
        profile.ms_by_workload[h] = profile.ms_by_workload.get(h, 0.0) + ms
        profile.calls_by_workload[h] = profile.calls_by_workload.get(h, 0) + calls
        profile.kernels_by_workload.setdefault(h, []).append(name)
    return profile
