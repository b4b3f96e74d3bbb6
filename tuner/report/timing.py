"""Latency of variants and peers in alternating blocks, and a per-kernel time profile.

Alternating (a block of A, a block of B, ... rotated round after round) spreads machine noise evenly over the
variants, so their ratio is fair even when absolute times drift, and times each runtime as a process that runs
it alone gets it (single interleaved calls do not: see alternating_blocks). The profile is the runtime's
(runtime.loader.profile_calls, the VM's instrument hook), restricted to the variant's kernels.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from tuner.core.stats import latency_stats, rotated


@dataclass
class Runnable:
    """A built variant ready to run: its VM, device and the inputs already on the device."""

    name: str
    vm: object
    device: object
    args: list

    @classmethod
    def from_build(cls, name: str, executable, device, feed: list[np.ndarray]) -> Runnable:
        import tvm
        from tvm.runtime.vm import VirtualMachine

        vm = VirtualMachine(executable, device)
        return cls(name, vm, device, [tvm.runtime.tensor(a, device) for a in feed])

    def run_once(self) -> float:
        t0 = time.perf_counter()
        self.vm["main"](*self.args)
        self.device.sync()
        return (time.perf_counter() - t0) * 1e3

    def outputs(self) -> list[np.ndarray]:
        out = self.vm["main"](*self.args)
        flat = []

        def walk(x):
            if hasattr(x, "numpy"):
                flat.append(x.numpy())
            else:
                for y in x:
                    walk(y)

        walk(out)
        return flat


def interleaved_latency(
    runnables: list[Runnable], repeat: int = 20, warmup: int = 3, extra: dict | None = None
) -> dict[str, dict]:
    """{name: latency stats in ms}; `extra` maps more names to zero-argument callables timed in the same loop."""
    timers = {r.name: r.run_once for r in runnables}
    for name, fn in (extra or {}).items():

        def timed(fn=fn):
            t0 = time.perf_counter()
            fn()
            return (time.perf_counter() - t0) * 1e3

        timers[name] = timed
    for _ in range(warmup):
        for fn in timers.values():
            fn()
    samples = {name: [] for name in timers}
    names = list(timers)
    for i in range(repeat):
        for name in rotated(names, i):
            samples[name].append(timers[name]())
    return {name: {**latency_stats(s), "samples_ms": [round(x, 4) for x in s]} for name, s in samples.items()}


def alternating_blocks(runners: dict, n_blocks: int = 6, runs: int | None = None, block_ms: float = 40.0) -> dict:
    """{name: ms per run}: `n_blocks` rounds in which each runner runs a block of back-to-back calls, the order
    rotating from round to round and the first call of each block dropped (it pays the switch from the previous
    runner: idle or spinning workers, cold caches). This is how a user's process runs one runtime, and how
    scripts/bench.py times the README's tables; single calls interleaved run for run were not (ONNX Runtime
    timed right after TVM's pool was busy ran 2.5x slower than in its own blocks). `runs` per block defaults to
    what fills `block_ms` for the slowest runner (3 to 30)."""
    if runs is None:
        slowest = 0.0
        for run in runners.values():
            run()
            t0 = time.perf_counter()
            run()
            slowest = max(slowest, (time.perf_counter() - t0) * 1e3)
        runs = int(min(30, max(3, block_ms / max(slowest, 1e-3))))
    samples = {k: [] for k in runners}
    for b in range(n_blocks):
        for k in rotated(list(runners), b):
            run = runners[k]
            run()
            for _ in range(runs):
                t0 = time.perf_counter()
                run()
                samples[k].append((time.perf_counter() - t0) * 1e3)
    return samples


PEERS = (  # (runner name, result key): what time_against_peers compares a package with
    ("onnxruntime", "vs_onnxruntime"),
    ("onnxruntime_no_spin", "vs_onnxruntime_no_spin"),
    ("openvino", "vs_openvino"),
)


def versus_peers(samples: dict, ours: str) -> dict:
    """Ratios of `ours` to each peer timed beside it (medians of alternating_blocks' samples), each in words."""
    from tuner.core.stats import compare_latency

    out = {}
    for peer, key in PEERS:
        if peer in samples:
            out[key] = float(np.median(samples[ours]) / np.median(samples[peer]))
            out[key + "_verdict"] = compare_latency(samples[ours], samples[peer])
    return out


def timing_method(samples: dict, failures: dict | None = None) -> dict:
    """How the peers were timed, said beside every ratio (and whether the machine was too busy to trust it);
    `failures` are peer_runners' reasons for a peer it left out."""
    return {
        "method": "alternating blocks of back-to-back calls, the first of each block dropped",
        "onnxruntime": "as shipped (spin-waiting) and without spin-waiting, the package's threads",
        "openvino": "CPU plugin, f32, the package's threads"
        if "openvino" in samples
        else (failures or {}).get("openvino", "not installed"),
        "warning": busy_machine(),
    }


def busy_machine() -> str | None:
    """Why timings taken now cannot be trusted (load above the cores this process may use), or None."""
    import os

    from tuner.runtime.threads import usable_cpus

    try:
        load = os.getloadavg()[0]
    except OSError:
        return None
    cores = usable_cpus()
    if load > cores + 0.5:  # our own timing keeps up to `cores` threads busy; more is someone else
        return f"the machine was busy while timing (load {load:.1f} on {cores} cores): ratios may be off"
    return None


def kernel_profile(runnable: Runnable, kernels: set[str], runs: int = 5) -> dict[str, dict]:
    """{kernel symbol: {"calls", "total_us", "mean_us"}} per inference, median over `runs` inferences."""
    from tuner.runtime.profile import profile_calls

    return profile_calls(runnable.vm, runnable.device, lambda: runnable.vm["main"](*runnable.args), runs, kernels)
