"""Tuned records checked in the model before they are packaged.

A candidate is timed alone, over and over, its weights and input hot in cache; in the model the layers before it
have pushed them out. So a record can win alone and lose in the model (light ResNet-50, tuned cold for 10
minutes, ran no faster than its default schedules in three runs, 0.97-1.11 x ONNX Runtime), and a record picked
as the fastest of hundreds of noisy measurements is partly picked for its luck. Here both builds, every tuned
kernel's record and every kernel's default schedule, run the model in turns under the VM's per-kernel profile,
and a record whose kernel runs slower in the model than its default (by `MARGIN` and `MIN_US`) is left out of
the package. The database keeps it: another machine or model may still use it.
"""

from __future__ import annotations

import numpy as np

from tuner.core.ir import PACKED

MARGIN = 0.03  # a record stays unless its kernel runs at least 3% slower in the model than the default ...
MIN_US = 2.0  # ... and at least this many microseconds per inference (below, the profile's own noise)
ROUNDS = 4  # turns per build; each turn profiles RUNS inferences
RUNS = 3


def slower_in_model(tuned, default, feed: list[np.ndarray], rounds: int = ROUNDS) -> dict[str, tuple[float, float]]:
    """{kernel: (µs per inference with its record, µs with the default schedule)} for every kernel of the `tuned`
    build (a BuildResult) that ran slower in the model with its record than in the `default` build."""
    import tvm
    from tvm.runtime.vm import VirtualMachine

    from tuner.core.stats import rotated
    from tuner.runtime.profile import profile_calls

    records = _kernels_with_records(tuned)
    if not records:
        return {}
    device = tvm.cpu()
    args = [tvm.runtime.tensor(a, device) for a in feed]
    vms = {name: VirtualMachine(b.executable, device) for name, b in (("tuned", tuned), ("default", default))}
    symbols = {s for k in records for s in (k, k + PACKED)}  # a kernel whose weights are packed is renamed
    times = {name: {} for name in vms}
    for i in range(rounds):
        for name in rotated(list(vms), i):  # turns alternate: drift falls on both builds alike
            vm = vms[name]
            for symbol, row in profile_calls(vm, device, lambda vm=vm: vm["main"](*args), RUNS, symbols).items():
                times[name].setdefault(symbol.removesuffix(PACKED), []).append(row["total_us"])
    slower = {}
    for kernel in sorted(records):
        with_record = float(np.median(times["tuned"].get(kernel, [0.0])))
        without = float(np.median(times["default"].get(kernel, [0.0])))
        if without and with_record > without * (1 + MARGIN) and with_record - without > MIN_US:
            slower[kernel] = (round(with_record, 1), round(without, 1))
    return slower


def _kernels_with_records(build) -> set[str]:
    """Kernels of the build that a database record scheduled other than as the default schedule (a record that is
    the default itself, the seed no candidate beat, runs the same program), named as lowered."""
    from tuner.core.ir import primfuncs

    if not build.db_info:
        return set()
    without = (
        set(build.db_info["untuned"]) | set(build.default_scheduled) | set(build.db_info.get("default_records", ()))
    )
    return {name.removesuffix(PACKED) for name in primfuncs(build.fused_mod)} - without
