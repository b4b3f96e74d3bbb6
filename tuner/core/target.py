"""Target resolution: `auto`, `llvm`, `llvm:MCPU`, `cuda`, `cuda:sm_90` -> a TVM target plus a stable key.

`auto` picks CUDA when a GPU is present, else LLVM for the host CPU with its mcpu and core count detected. The
key (`llvm-znver3-2c`, `cuda-sm_90`) names tuning-database folders and is checked when a package is loaded.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
from dataclasses import dataclass

from tuner.core.errors import TunerError

# The ISA levels our kernels' vector code is built for; a package records its mcpu, and LLVM says which of these
# that mcpu implies (checked against the host when a package is loaded; AVX-512 also sets the vector width).
_CHECKED_FEATURES = ("avx512f", "avx2", "fma")


@dataclass(frozen=True)
class TargetSpec:
    kind: str  # "llvm" | "cuda"
    config: dict  # the dict given to tvm.target.Target
    key: str

    def tvm_target(self):
        import tvm

        return tvm.target.Target(self.config)

    @property
    def is_gpu(self) -> bool:
        return self.kind == "cuda"

    @property
    def arch(self) -> str | None:
        return self.config.get("arch")

    def to_json(self) -> dict:
        return {"kind": self.kind, "config": self.config, "key": self.key}


def host_cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def host_cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or "unknown"


def host_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def detect_mcpu() -> str:
    from tvm.target import codegen

    return str(codegen.llvm_get_system_cpu())


def detect_gpu_arch() -> str | None:
    """sm_XX of the local GPU, or None when there is none (no driver, no device)."""
    try:
        import tvm

        dev = tvm.cuda(0)
        if dev.exist:
            return "sm_" + str(dev.compute_version).replace(".", "")
    except Exception:
        pass
    return None


def cuda_toolchain_available() -> bool:
    if shutil.which("nvcc") or os.path.exists("/usr/local/cuda/bin/nvcc"):
        return True
    try:
        import cuda.bindings.nvrtc  # noqa: F401

        return True
    except Exception:
        return False


@functools.cache
def required_cpu_features(mcpu: str) -> tuple[str, ...]:
    """The ISA features of _CHECKED_FEATURES that LLVM's model of `mcpu` has (any CPU LLVM knows; a table of
    names missed Intel's rocketlake, whose AVX-512 then went unused)."""
    import tvm
    from tvm.target import codegen

    if mcpu in ("", "generic") or not codegen.llvm_is_valid_cpu(mcpu, "x86_64-unknown-linux-gnu"):
        return ()  # nothing to rely on, or an mcpu this LLVM does not know (a package from a newer one)
    target = tvm.target.Target({"kind": "llvm", "mcpu": mcpu})
    return tuple(f for f in _CHECKED_FEATURES if codegen.llvm_cpu_has_features([f], target))


def resolve_target(spec: str) -> TargetSpec:
    spec = (spec or "auto").strip()
    kind, _, arg = spec.partition(":")
    if kind == "auto":
        arch = detect_gpu_arch()
        return _cuda(arch) if arch else _llvm(None)
    if kind == "llvm":
        return _llvm(arg or None)
    if kind == "cuda":
        if arg:
            if not re.fullmatch(r"sm_\d{2,3}[a-z]?", arg):
                raise TunerError(f"target {spec!r}: {arg!r} is not a CUDA arch", "write e.g. cuda:sm_90 or cuda:sm_80")
            return _cuda(arg)
        arch = detect_gpu_arch()
        if not arch:
            raise TunerError(
                "target 'cuda': no GPU found here to take the arch from", "name the arch, e.g. --target cuda:sm_90"
            )
        return _cuda(arch)
    raise TunerError(f"unknown target {spec!r}", "use one of: auto, llvm, llvm:MCPU, cuda, cuda:sm_XX")


def _llvm(mcpu: str | None) -> TargetSpec:
    from tvm.target import codegen

    mcpu = mcpu or detect_mcpu()
    if not codegen.llvm_is_valid_cpu(mcpu, "x86_64-unknown-linux-gnu") and mcpu != "generic":
        raise TunerError(
            f"target llvm:{mcpu}: LLVM does not know CPU {mcpu!r}",
            "e.g. llvm:znver4, llvm:skylake-avx512, or plain llvm to detect",
        )
    cores = host_cores()
    config = {"kind": "llvm", "mcpu": mcpu, "num-cores": cores}
    return TargetSpec("llvm", config, f"llvm-{mcpu}-{cores}c")


def _cuda(arch: str) -> TargetSpec:
    if not cuda_toolchain_available():
        raise TunerError(
            f"target cuda:{arch}: neither nvcc nor NVRTC is available to build CUDA code",
            "install the CUDA toolkit (nvcc) or `pip install cuda-bindings nvidia-cuda-nvrtc`",
        )
    config = {
        "kind": "cuda",
        "arch": arch,
        "max_threads_per_block": 1024,
        "max_shared_memory_per_block": 49152,
        "thread_warp_size": 32,
        "host": {"kind": "llvm"},
    }
    return TargetSpec("cuda", config, f"cuda-{arch}")


def vector_lanes(target_spec) -> int:
    """fp32 lanes of the target's widest vector unit (16 with AVX-512, else 8)."""
    return 16 if "avx512f" in required_cpu_features(target_spec.config.get("mcpu", "")) else 8
