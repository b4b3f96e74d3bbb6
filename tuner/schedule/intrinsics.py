"""The tensor intrinsics a target's schedule rules can name, registered without every other target's.

MetaSchedule's TuneContext (and its default build) import `tvm.s_tir.tensor_intrin`, whose `__init__` parses every
target's intrinsics from TVMScript: 13-16 s per process on these 2-core machines, paid by each `tune-model` run
before its first round. The llvm rules can name only the CPU dot products (x86 VNNI/AVX-512, ARM, RISC-V: 0.8 s
together), the CUDA tensor-core rules only WMMA/MMA (5 s). `register` puts the package in `sys.modules` without
running its `__init__` and imports the target's modules into it; TVM's own `import tvm.s_tir.tensor_intrin` then
finds it loaded."""

from __future__ import annotations

import importlib
import importlib.util
import sys

PACKAGE = "tvm.s_tir.tensor_intrin"
MODULES = {"llvm": ("x86", "arm_cpu", "riscv_cpu"), "cuda": ("cuda",)}


def register(kind: str) -> None:
    """Register the intrinsics of target kind `kind` ("llvm" or "cuda"); idempotent, and a no-op for the modules
    already loaded (the whole package, when something imported it first)."""
    import tvm.s_tir

    if PACKAGE not in sys.modules:
        spec = importlib.util.find_spec(PACKAGE)
        package = importlib.util.module_from_spec(spec)  # not executed: that is what parses every target
        sys.modules[PACKAGE] = package
        tvm.s_tir.tensor_intrin = package
    for name in MODULES.get(kind, ()):
        importlib.import_module(f"{PACKAGE}.{name}")
