"""This CPU's float32 compute peak: from the ISA, checked by an FMA loop built by TVM for the target.

The roofline's ceiling used to be numpy's 1024^3 matmul, a BLAS kernel that is not the hardware's limit: reports
drew our own kernels at 111-151 GFLOP/s above a "measured peak" of 70. The ceiling now comes from what the core
can issue: vector lanes (the target's widest float32 vector) x 2 FLOPs per FMA x FMA pipes x clock x threads.
Pipes and the clock under load are not in the ISA (a Zen 4 core issues two 256-bit FMAs a cycle, AVX-512 ones in
two halves; some Xeons have one 512-bit FMA unit, most two; boost clocks exceed the nominal one), so an FMA loop
measures them: independent vector FMA chains in registers, one set per thread, on the package's threads. The
measured loop is the peak; the ISA figure explains it (`isa_explanation`). On this Zen 4 (2 threads): 233-256
GFLOP/s, where numpy's matmul reached 199.
"""

from __future__ import annotations

import time

CHAINS = 12  # independent accumulators per thread: FMA latency (4 cycles) x 2 pipes, with room
STEPS = 1_000_000  # FMAs per chain per call: 3 ms per call at 250 GFLOP/s (short calls timed the pool waking up)


def fma_loop(lanes: int, threads: int, chains: int = CHAINS, steps: int = STEPS):
    """A PrimFunc: per thread, `chains` vectors of `lanes` float32 updated `steps` times by acc = acc * c + d.
    The accumulators are the output itself and the factors are constants: a local buffer inside a parallel loop
    is a heap workspace and inputs read in the loop may alias the output, and either way LLVM kept the
    accumulators in memory (a store per FMA: half the peak, below numpy's matmul)."""
    from tvm.script import tirx as T

    @T.prim_func
    def main(out: T.Buffer((threads, chains, lanes), "float32")):
        T.func_attr({"global_symbol": "main", "tir.noalias": True})
        for p in T.parallel(threads):
            for k in T.unroll(chains):
                for lane in T.vectorized(lanes):
                    out[p, k, lane] = out[p, k, lane] + T.float32(k)  # runtime data: nothing to fold
            for _ in range(steps):
                for k in T.unroll(chains):
                    for lane in T.vectorized(lanes):
                        out[p, k, lane] = out[p, k, lane] * T.float32(0.999) + T.float32(0.001)

    return main


def build_fma_loop(target, lanes: int, threads: int, steps: int = STEPS):
    """The FMA loop compiled for `target` (a tvm Target): a module whose `main` takes the accumulators."""
    import tvm

    return tvm.compile(tvm.IRModule({"main": fma_loop(lanes, threads, steps=steps)}), target=target)


def measure_fma_gflops(target, lanes: int, threads: int, repeat: int = 7) -> float:
    """GFLOP/s of the FMA loop on `threads` threads: best of `repeat` calls (throughput probes on shared
    machines are bimodal, as in report/machine.py)."""
    import numpy as np
    import tvm

    lib = build_fma_loop(target, lanes, threads)
    out = tvm.runtime.tensor(np.ones((threads, CHAINS, lanes), np.float32), tvm.cpu())
    f = lib["main"]
    f(out)  # warm-up: the thread pool starts
    f(out)
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        f(out)
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
    """(peak GFLOP/s, how it was obtained) for the CPU target on `threads` threads: the FMA loop on all of them,
    or one thread's rate times `threads` when that is higher. The pool's placement is bimodal on these VMs: in 1
    of 3 fresh processes the two-thread loop ran at one thread's rate (118 against 234 GFLOP/s), and a ceiling
    below what the kernels reach is the bug this replaces."""
    from tuner.core.target import vector_lanes

    lanes, target = vector_lanes(target_spec), target_spec.tvm_target()
    together = measure_fma_gflops(target, lanes, threads)
    alone = measure_fma_gflops(target, lanes, 1) * threads if threads > 1 else 0.0
    measured = max(together, alone)
    how = f"{threads} thread(s) together" if together >= alone else f"one thread's rate x {threads}"
    words = f"FMA loop measured: {lanes}-lane float32 FMAs, {CHAINS} chains per thread, {how}"
    explained = isa_explanation(measured, lanes, threads, nominal_ghz())
    return measured, words + (f"; {explained}" if explained else "")


def isa_explanation(gflops: float, lanes: int, threads: int, nominal: float | None) -> str | None:
    """The loop's rate in the ISA's terms: full-width FMAs per cycle (1 or 2: one 512-bit unit, or two 256-bit
    halves, or two 512-bit units) and the clock that rate implies, taking the most FMAs per cycle whose clock is
    not below the nominal one (a core under load runs at its nominal clock or a boost above it). Zen 4, 2
    threads: 256 GFLOP/s = 16 lanes x 2 FLOPs x 1 FMA/cycle x 2 threads at 4.0 GHz (nominal 2.6)."""
    if not nominal:
        return None
    for pipes in (2, 1):
        ghz = gflops / isa_peak_gflops(lanes, pipes, 1.0, threads)
        if ghz >= 0.95 * nominal or pipes == 1:
            return (
                f"ISA: {lanes} lanes x 2 FLOPs x {pipes} full-width FMA/cycle x {threads} thread(s) at {ghz:.2f} GHz"
                f" (nominal {nominal:.2f} GHz)"
            )
    return None
