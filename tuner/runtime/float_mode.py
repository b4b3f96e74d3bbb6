"""Flush-to-zero for a package's calls on x86: MXCSR's FTZ and DAZ bits on every thread of TVM's pool.

On x86 a float operation with a subnormal operand or result (|x| < 1.18e-38) can take a microcode assist, up to
~100x slower on Intel cores. Subnormal weights are flushed when a package is built (frontend/onnx_model); this
covers activations that reach the subnormal range at run time (a product of small values, an exp far below 0).
FTZ writes such results as 0 and DAZ reads such inputs as 0, as ONNX Runtime's `set_denormal_as_zero` does.

MXCSR is per thread, and TVM keeps a pool of worker threads per calling thread (task 0 runs on the caller). A
call with flushing on sets both bits on the pool's threads through a parallel loop of one iteration per thread
(TVM gives each of its n tasks one of n iterations), runs, then gives the caller its own MXCSR back, so numpy
and everything else in the caller keeps IEEE subnormals. The workers keep the bits: later calls at the same
thread count set the caller's only, and the next call on that pool that does not flush clears them first
(`_PER_THREAD`), so a package loaded without the option never computes with another's setting. Worker threads
that TVM would create anew behind the package's back are not seen. Off by default: measured in
docs/performance.md ("Flush-to-zero at run time").
"""

from __future__ import annotations

import platform
import threading

FTZ, DAZ = 1 << 15, 1 << 6  # MXCSR bits: flush results to zero, read subnormal inputs as zero
_PER_THREAD = threading.local()  # per calling thread: its pool's last setting (`pool`) and its two words
_KERNELS = None  # `_Kernels`, compiled at the first flushing call of the process
_KERNELS_LOCK = threading.Lock()


def supported() -> bool:
    """Flush-to-zero is built for x86-64 hosts (MXCSR); other CPUs have their own control register."""
    return platform.machine().lower() in ("x86_64", "amd64")


class _Kernels:
    """TIR functions that read the caller's MXCSR (`read`), set it on the caller only (`write_here`) and on `n`
    threads of the caller's pool (`write_pool`), and TVM's `runtime.NumThreads` (the calling thread's pool size)."""

    def __init__(self):
        import tvm
        from tvm.script import tirx as T

        def stmxcsr(at):
            return T.call_llvm_intrin("void", "llvm.x86.sse.stmxcsr", T.address_of(at))

        def ldmxcsr(at):
            return T.call_llvm_intrin("void", "llvm.x86.sse.ldmxcsr", T.address_of(at))

        @T.prim_func
        def read(out: T.Buffer((1,), "int32")):
            T.func_attr({"global_symbol": "read", "tir.noalias": True})
            T.evaluate(stmxcsr(out[0]))

        @T.prim_func
        def write_here(value: T.Buffer((1,), "int32")):
            T.func_attr({"global_symbol": "write_here", "tir.noalias": True})
            T.evaluate(ldmxcsr(value[0]))

        @T.prim_func
        def write_pool(value: T.Buffer((1,), "int32"), n: T.int32):
            T.func_attr({"global_symbol": "write_pool", "tir.noalias": True})
            for _ in T.parallel(n):
                T.evaluate(ldmxcsr(value[0]))

        self.lib = tvm.compile(
            tvm.IRModule({"read": read, "write_here": write_here, "write_pool": write_pool}), target="llvm"
        )
        self.read, self.write_here, self.write_pool = (self.lib[n] for n in ("read", "write_here", "write_pool"))
        self.pool_size = tvm.get_global_func("runtime.NumThreads")


def _kernels() -> _Kernels:
    """The kernels, compiled once per process (~50 ms); no lock once they exist (every flushing call asks)."""
    global _KERNELS
    if _KERNELS is None:
        with _KERNELS_LOCK:
            if _KERNELS is None:
                _KERNELS = _Kernels()
    return _KERNELS


def _words():
    """This thread's two one-word tensors (the caller's MXCSR, the value to set) and numpy views over them: made
    once per thread, as a tensor from numpy costs ~50 us and `.numpy()` ~10 against 0.4 for the read itself."""
    words = getattr(_PER_THREAD, "words", None)
    if words is None:
        import numpy as np
        import tvm

        tensors = [tvm.runtime.empty((1,), "int32", tvm.cpu()) for _ in range(2)]
        words = _PER_THREAD.words = [(t, np.from_dlpack(t)) for t in tensors]
    return words


def read_mxcsr() -> int:
    """This thread's MXCSR."""
    (word, view), _ = _words()
    _kernels().read(word)
    return int(view[0]) & 0xFFFF


class Scope:
    """Around one call of a Model: sets the calling thread's pool flushing or not, and gives the caller its own
    MXCSR back afterwards. A call that does not flush, on a pool no flushing call touched, costs one
    thread-local lookup."""

    def __init__(self, flush: bool):
        self.flush, self.caller = flush, None

    def __enter__(self):
        state = getattr(_PER_THREAD, "pool", None)  # (flushing, threads) last set on this thread's pool; None: never
        if not self.flush and (state is None or not state[0]):
            return self
        k = _kernels()
        # every task of the pool as it is now, not as the Model's thread governor believes it is (a fresh thread's
        # pool starts at TVM_NUM_THREADS): a test found a worker left unflushed that way
        threads = int(k.pool_size())
        (self.caller, caller_view), (value, value_view) = _words()
        k.read(self.caller)
        base = int(caller_view[0]) & ~(FTZ | DAZ)  # the caller's rounding and exception masks, without the two
        value_view[0] = base | FTZ | DAZ if self.flush else base
        if state != (self.flush, threads):
            k.write_pool(value, threads)  # ~2-9 us: a parallel launch
            _PER_THREAD.pool = (self.flush, threads)
        else:  # the workers kept it from the last call: only the caller, which runs task 0 (~0.3 us)
            k.write_here(value)
        return self

    def __exit__(self, *exc):
        if self.caller is not None:
            _kernels().write_here(self.caller)  # give the caller back its own MXCSR
        return False
