"""Latency measured interleaved across variants, and a per-kernel time profile.

Interleaving (variant A once, B once, ... repeated) spreads machine noise evenly over the variants, so their
ratio is fair even when absolute times drift. The profile is the runtime's (runtime.loader.profile_calls, the
VM's instrument hook), restricted to the variant's kernels.
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


def kernel_profile(runnable: Runnable, kernels: set[str], runs: int = 5) -> dict[str, dict]:
    """{kernel symbol: {"calls", "total_us", "mean_us"}} per inference, median over `runs` inferences."""
    from tuner.runtime.profile import profile_calls

    return profile_calls(runnable.vm, runnable.device, lambda: runnable.vm["main"](*runnable.args), runs, kernels)
