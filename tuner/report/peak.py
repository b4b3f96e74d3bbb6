"""This CPU's float32 compute peak: from the ISA, checked by an FMA loop built by TVM for the target.

The roofline's ceiling used to be numpy's 1024^3 matmul, a BLAS kernel that is not the hardware's limit: reports
drew our own kernels at 111-151 GFLOP/s above a "measured peak" of 70. The ceiling now comes from what the core
can issue: vector lanes (the target's widest float32 vector) x 2 FLOPs per FMA x FMA pipes x clock x threads.
Pipes and the clock under load are not in the ISA (a Zen 4 core issues two 256-bit FMAs a cycle, AVX-512 ones in
two halves; some Xeons have one 512-bit FMA unit, most two), so an FMA loop measures them: independent vector
FMA chains in registers, one per thread, as the package's threads run. The measured loop is the peak; the ISA
figure is how the report explains it (FLOPs per cycle per core at the nominal clock).
"""

from __future__ import annotations

import time

CHAINS = 12  # independent accumulators per thread: FMA latency (4 cycles) x 2 pipes, with room
STEPS = 100_000  # FMAs per chain per call: ~1 ms per call at 200 GFLOP/s


def fma_loop(lanes: int, threads: int, chains: int = CHAINS, steps: int = STEPS):
    """A PrimFunc: per thread, `chains` vectors of `lanes` float32 updated `steps` times by acc = acc * a + b."""
    from tvm.script import tirx as T

    @T.prim_func
    def main(a: T.Buffer((lanes,), "float32"), b: T.Buffer((lanes,), "float32"), out: T.Buffer((threads, chains, lanes), "float32")):  # fmt: skip  # noqa: E501
        T.func_attr({"global_symbol": "main", "tir.noalias": True})
        for p in T.parallel(threads):
            acc = T.decl_buffer((chains, lanes), "float32", scope="local")
            for k in T.unroll(chains):
                for lane in T.vectorized(lanes):
                    acc[k, lane] = a[lane] + T.float32(k)
            for _ in range(steps):
                for k in T.unroll(chains):
                    for lane in T.vectorized(lanes):
                        acc[k, lane] = acc[k, lane] * a[lane] + b[lane]
            for k in T.unroll(chains):
                for lane in T.vectorized(lanes):
                    out[p, k, lane] = acc[k, lane]

    return main


def build_fma_loop(target, lanes: int, threads: int, steps: int = STEPS):
    """The FMA loop compiled for `target` (a tvm Target): a module whose `main` takes (a, b, out)."""
    import tvm

    return tvm.compile(tvm.IRModule({"main": fma_loop(lanes, threads, steps=steps)}), target=target)


def measure_fma_gflops(target, lanes: int, threads: int, repeat: int = 7) -> float:
    """GFLOP/s of the FMA loop on `threads` threads: best of `repeat` calls (throughput probes on shared
    machines are bimodal, as in report/machine.py)."""
    import numpy as np
    import tvm

    lib = build_fma_loop(target, lanes, threads)
    device = tvm.cpu()
    a = tvm.runtime.tensor(np.full(lanes, 0.999, np.float32), device)
    b = tvm.runtime.tensor(np.full(lanes, 1e-3, np.float32), device)
    out = tvm.runtime.tensor(np.zeros((threads, CHAINS, lanes), np.float32), device)
    f = lib["main"]
    f(a, b, out)  # warm-up: the thread pool starts
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        f(a, b, out)
        best = min(best, time.perf_counter() - t0)
    return 2 * threads * CHAINS * lanes * STEPS / best / 1e9


def nominal_ghz() -> float | None:
    """The clock the kernel reports (/proc/cpuinfo's "cpu MHz"; under a hypervisor the nominal one)."""
    try:
        with open("/proc/cpuinfo") as f:
            mhz = [float(line.split(":")[1]) for line in f if line.startswith("cpu MHz")]
    except OSError:
        return None
    return max(mhz) / 1e3 if mhz else None


def isa_peak_gflops(lanes: int, fma_pipes: float, ghz: float, threads: int) -> float:
    """lanes x 2 FLOPs per FMA x full-width FMAs per cycle x GHz x threads."""
    return lanes * 2 * fma_pipes * ghz * threads


def cpu_peak(target_spec, threads: int) -> tuple[float, str]:
    """(peak GFLOP/s, how it was obtained) for the CPU target on `threads` threads."""
    from tuner.core.target import vector_lanes

    lanes = vector_lanes(target_spec)
    measured = measure_fma_gflops(target_spec.tvm_target(), lanes, threads)
    ghz = nominal_ghz()
    words = f"FMA loop measured: {lanes}-lane float32 FMAs, {CHAINS} chains per thread, {threads} thread(s)"
    if ghz:  # the ISA's figure at the nearest half FMA per cycle, and how close the loop came to it
        pipes = max(0.5, round(measured / (threads * ghz * 2 * lanes) * 2) / 2)
        isa = isa_peak_gflops(lanes, pipes, ghz, threads)
        words += (
            f"; ISA: {lanes} lanes x 2 FLOPs x {pipes:g} full-width FMA/cycle x {ghz:.2f} GHz nominal x {threads}"
            f" = {isa:.0f} GFLOP/s, the loop reached {measured / isa:.0%}"
        )
    return measured, words
