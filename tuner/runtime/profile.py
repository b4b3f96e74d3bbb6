"""Where a package's time goes: every call of the Relax VM timed through its instrument hook."""

from __future__ import annotations

import time

import numpy as np


def profile_calls(
    vm, device, run, runs: int = 5, only: set[str] | None = None, order: list | None = None
) -> dict[str, dict]:
    """{call symbol: {"calls", "total_us", "mean_us"}} per inference, median over `runs` inferences after a
    warm-up, for every call the VM makes (or the symbols in `only`). TVM 0.27 ships no Python VM profiler: the
    VM's instrument hook fires before and after each call instruction, and the time between the two, with the
    device synchronised, is that call's (the hook's own Python cost sits outside the window). `order`, when given,
    receives the symbols of one inference in the order they were called."""
    import tvm_ffi

    current: dict[str, list[float]] = {}
    start = {}

    def instrument(func, symbol, before, ret, *args):
        if only is None or symbol in only:
            device.sync()
            if before:
                start[symbol] = time.perf_counter()
            else:
                current.setdefault(str(symbol), []).append((time.perf_counter() - start.pop(symbol)) * 1e6)
                sequence.append(str(symbol))
        return 0  # VMInstrumentReturnKind.kNoOp: run the call as usual

    vm.set_instrument(tvm_ffi.convert(instrument))
    per_run, sequence = [], []
    try:
        run()  # warm-up
        for _ in range(runs):
            current.clear()
            sequence.clear()
            run()
            per_run.append({k: list(v) for k, v in current.items()})
    finally:
        vm.set_instrument(tvm_ffi.convert(lambda *a: 0))
    if order is not None:
        order[:] = sequence
    out = {}
    for k in per_run[0] if per_run else {}:
        totals = [sum(r.get(k, [])) for r in per_run]
        calls = len(per_run[0][k])
        total = float(np.median(totals))
        out[k] = {"calls": calls, "total_us": total, "mean_us": total / calls}
    return out
