"""This machine's limits, measured: what one kernel launch costs, and the roofline's two ceilings.

- Launch cost: a Relax function of K chained one-element adds against one with a single add, built for the
  target and run in the VM; (t_K - t_1) / (K - 1) is what each extra launch adds, dispatch included.
- Peak GFLOP/s (CPU): an FMA loop built by TVM for the target, on the package's threads, explained by the ISA
  (report/peak.py). numpy's matmul, used before, is a BLAS kernel below the hardware's limit: our own kernels
  were drawn above it.
- Peak GB/s: a 128 MiB array copy (read + write), split over every core, best of N.
Best-of-N because throughput on shared machines is bimodal; pass --peak-gflops / --peak-gbps to override.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

import numpy as np


@dataclass
class MachineLimits:
    launch_us: float | None
    peak_gflops: float
    peak_gbps: float
    source: dict  # how each number was obtained ("measured" or "given")

    @property
    def ridge(self) -> float:
        """FLOPs per byte where the roofline's slope meets its ceiling."""
        return self.peak_gflops / self.peak_gbps

    def to_json(self) -> dict:
        return {**asdict(self), "ridge_flops_per_byte": self.ridge}


def _best_time(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def measure_peak_gbps(mib: int = 128, repeat: int = 5) -> float:
    import os
    from concurrent.futures import ThreadPoolExecutor

    src = np.ones(mib * 2**20 // 4, dtype=np.float32)
    dst = np.empty_like(src)
    workers = os.cpu_count() or 1
    # one slice per core: numpy releases the GIL while copying, so the copies run in parallel
    bounds = np.linspace(0, src.size, workers + 1).astype(int)
    slices = [slice(a, b) for a, b in zip(bounds, bounds[1:])]
    with ThreadPoolExecutor(workers) as pool:

        def copy():
            list(pool.map(lambda s: np.copyto(dst[s], src[s]), slices))

        copy()
        return 2 * src.nbytes / _best_time(copy, repeat) / 1e9


def _chain(k: int):
    from tvm import relax, te, topi

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1,), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = x
            for i in range(k):
                # a distinct constant per add keeps each launch a separate kernel
                y = bb.emit_te(
                    lambda t, c=float(i + 1): topi.add(t, te.const(c, "float32")), y, primfunc_name_hint=f"add{i}"
                )
            out = bb.emit_output(y)
        bb.emit_func_output(out)
    return bb.get()


def measure_launch_us(target_spec, k: int = 64, repeat: int = 200) -> float | None:
    """Cost of one extra kernel launch in the VM on this target, in microseconds (None: no device to run)."""
    import tvm
    from tvm.runtime.vm import VirtualMachine

    if target_spec.is_gpu:
        from tuner.core.target import detect_gpu_arch

        if not detect_gpu_arch():
            return None
    dev = tvm.cuda(0) if target_spec.is_gpu else tvm.cpu(0)
    times = {}
    for n in (1, k):
        mod = _chain(n)
        if target_spec.is_gpu:
            from tuner.build.executable import schedule_for_gpu

            mod = schedule_for_gpu(mod, target_spec)
        ex = tvm.compile(mod, target=target_spec.tvm_target(), relax_pipeline="default_build")  # no fusion
        vm = VirtualMachine(ex, dev)
        x = tvm.runtime.tensor(np.zeros(1, np.float32), dev)
        for _ in range(10):
            vm["main"](x)

        def run(vm=vm, x=x):
            vm["main"](x)
            dev.sync()

        # median of single-run times: robust to preemption spikes
        samples = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            run()
            samples.append(time.perf_counter() - t0)
        times[n] = float(np.median(samples))
    return max(0.0, (times[k] - times[1]) / (k - 1) * 1e6)


def machine_limits(
    target_spec, peak_gflops: float | None = None, peak_gbps: float | None = None, measure_launch: bool = True
) -> MachineLimits:
    source = {"launch_us": "measured (VM, chained 1-element kernels)" if measure_launch else "not measured"}
    if target_spec.is_gpu and (peak_gflops is None or peak_gbps is None):
        # the numpy probes measure the host CPU, not the GPU
        if peak_gflops is None or peak_gbps is None:
            from tuner.core.errors import TunerError

            raise TunerError(
                f"compare --target {target_spec.key}: give the GPU's roofline with --peak-gflops and --peak-gbps",
                "e.g. H100 SXM fp32: --peak-gflops 67000 --peak-gbps 3350",
            )
    if peak_gflops is None:
        from tuner.report.peak import cpu_peak

        peak_gflops, source["peak_gflops"] = cpu_peak(target_spec, int(target_spec.config.get("num-cores", 1)))
    else:
        source["peak_gflops"] = "given (--peak-gflops)"
    if peak_gbps is None:
        peak_gbps, source["peak_gbps"] = measure_peak_gbps(), "measured (numpy 128 MiB copy on every core, best of 5)"
    else:
        source["peak_gbps"] = "given (--peak-gbps)"
    launch = measure_launch_us(target_spec) if measure_launch else None
    if launch is None:
        source["launch_us"] = "not measured (no device)"
    return MachineLimits(launch, float(peak_gflops), float(peak_gbps), source)
