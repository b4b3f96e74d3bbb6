"""Compiled CUDA device code inside the package, so a deployment host needs no compiler.

TVM 0.27 keeps a CUDA module's source and compiles it when the library is loaded, through the global
`tvm_callback_cuda_compile` (NVRTC or nvcc). At build time we compile that source once with nvcc into a fatbin
for the package's arch (SASS for sm_XX plus PTX for compute_XX, so newer GPUs can JIT it), and store it with the
source's sha256. At load time `serve()` registers a callback that hands TVM the packaged binary for that
source; any other source is an error that says to rebuild, never a silent compile.
This module must stay importable without the compiler (only `compile_fatbin` needs nvcc).
"""

from __future__ import annotations

import hashlib
import os

from tuner.core.errors import TunerError

MEMBER = "device/kernels.{arch}.fatbin"


def cuda_sources(executable) -> list[str]:
    """The CUDA source of every CUDA module imported by the executable's library."""
    found = []

    def walk(mod):
        if getattr(mod, "kind", "") == "cuda":
            found.append(mod.inspect_source("cuda"))
        for sub in getattr(mod, "imports", []):
            walk(sub)

    walk(executable.mod)
    return found


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def compile_fatbin(source: str, target_spec) -> bytes:
    """nvcc at build time; a clear error when it is missing or fails."""
    import shutil

    if not shutil.which("nvcc"):
        raise TunerError(
            "CUDA build: nvcc is not on PATH, so the package cannot carry compiled device code",
            "install the CUDA toolkit (nvcc) on the build machine",
        )
    os.environ.setdefault("CUDA_PATH", "/usr/local/cuda")  # /usr/local/bin/nvcc may be a wrapper
    from tvm.support import nvcc

    arch = target_spec.arch
    try:
        with target_spec.tvm_target():  # nvcc.compile_cuda reads parts of its command line from the target
            return bytes(nvcc.compile_cuda(source, target_format="fatbin", arch=arch, compiler="nvcc"))
    except Exception as err:
        raise TunerError(
            f"CUDA build: nvcc failed for {arch}: {_first_error(str(err))}",
            "run with --debug for the full nvcc output",
        ) from err


def _first_error(output: str) -> str:
    """nvcc's first error line (ptxas's "uses too much shared data"), not its last info line."""
    lines = [ln.strip() for ln in output.strip().splitlines() if ln.strip()]
    errors = [ln for ln in lines if (" error" in ln or ln.startswith("error")) and ln != "Compilation error:"]
    return (errors or lines or ["(no output)"])[0][:300]


def package_members(executable, target_spec) -> tuple[dict[str, bytes], dict]:
    """({member: fatbin}, manifest entry) for a CUDA executable."""
    sources = cuda_sources(executable)
    if len(sources) != 1:
        raise TunerError(
            f"CUDA build: expected one CUDA module in the library, found {len(sources)}",
            "this is a bug; please report it",
        )
    arch = target_spec.arch
    blob = compile_fatbin(sources[0], target_spec)
    member = MEMBER.format(arch=arch)
    return {member: blob}, {
        "format": "fatbin",
        "arch": arch,
        "member": member,
        "source_sha256": sha256(sources[0]),
        "compiler": "nvcc",
        "bytes": len(blob),
    }


class PackagedDeviceCode:
    """The callback TVM calls to compile CUDA source at load time, answered from the package."""

    def __init__(self, path: str, entry: dict, blob: bytes):
        self.path, self.entry, self.blob = path, entry, blob
        self.served = 0

    def __call__(self, code: str) -> bytes:
        if sha256(code) != self.entry["source_sha256"]:
            raise TunerError(
                f"{self.path}: the library asked for CUDA code the package does not carry",
                "the package was built by another fusion-tuner/TVM; rebuild it",
            )
        self.served += 1
        return self.blob


def serve(path: str, manifest: dict, members: dict[str, bytes]) -> PackagedDeviceCode | None:
    """Register the packaged device code as TVM's CUDA compile callback (None: the package has none)."""
    entry = manifest.get("device_code")
    if not entry:
        return None
    import tvm_ffi

    handler = PackagedDeviceCode(path, entry, members[entry["member"]])
    tvm_ffi.register_global_func("tvm_callback_cuda_compile", handler, override=True)
    return handler
