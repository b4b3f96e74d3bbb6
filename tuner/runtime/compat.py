"""Whether a package can run here, checked before its library is loaded: TVM and tvm-ffi versions, the target's
CPU features or GPU arch, an ELF library for this processor; and the cleanup of library copies that crashed
processes left behind."""

from __future__ import annotations

import os
import re
import tempfile

from tuner.core.errors import TunerError
from tuner.core.target import host_cpu_flags, required_cpu_features
from tuner.runtime.package import LIBRARY


def check_compatible(manifest: dict, device: str | None, path: str) -> str:
    """Raise when the package cannot run here; return the device kind to use ('cpu' or 'cuda')."""
    import tvm
    import tvm_ffi

    built_tvm = manifest.get("tvm_version")
    if built_tvm != tvm.__version__:
        raise TunerError(
            f"{path}: built with TVM {built_tvm}, this runtime is TVM {tvm.__version__}",
            "rebuild the package with this TVM, or install the TVM it was built with",
        )
    if (
        manifest.get("tvm_ffi_version")
        and manifest["tvm_ffi_version"].split(".")[:2] != tvm_ffi.__version__.split(".")[:2]
    ):
        raise TunerError(
            f"{path}: built with tvm-ffi {manifest['tvm_ffi_version']}, this runtime has {tvm_ffi.__version__}",
            "install the tvm-ffi version it was built with",
        )
    target = manifest["target"]
    kind = "cuda" if target["kind"] == "cuda" else "cpu"
    if device is not None and device not in ("cpu", "cuda", "gpu"):
        raise TunerError(f"unknown device {device!r}", "use device='cpu' or device='cuda'")
    wanted = None if device is None else ("cuda" if device in ("cuda", "gpu") else "cpu")
    if wanted is not None and wanted != kind:
        raise TunerError(
            f"{path}: built for {target['key']}, which runs on {kind}, not on {wanted}",
            f"rebuild with --target {'cuda' if wanted == 'cuda' else 'llvm'}",
        )
    if kind == "cpu":
        missing = [f for f in required_cpu_features(target["config"].get("mcpu", "")) if f not in host_cpu_flags()]
        if missing:
            raise TunerError(
                f"{path}: built for CPU {target['config']['mcpu']}, which needs {', '.join(missing)}; "
                f"this CPU lacks them",
                "rebuild on (or for) this machine: --target llvm",
            )
    else:
        dev = tvm.cuda(0)
        if not tvm.runtime.enabled("cuda") or not dev.exist:
            raise TunerError(
                f"{path}: built for CUDA ({target['config'].get('arch')}), but no GPU is available here",
                "run it on a machine with an NVIDIA GPU and driver, or rebuild with --target llvm",
            )
        arch = "sm_" + str(dev.compute_version).replace(".", "")
        if arch != target["config"].get("arch"):
            raise TunerError(
                f"{path}: built for {target['config'].get('arch')}, this GPU is {arch}",
                f"rebuild with --target cuda:{arch}",
            )
    return kind


# ELF e_machine of the hosts packages are built on
_ELF_MACHINES = {"x86_64": 62, "aarch64": 183, "arm64": 183}


def _check_library(data: bytes, path: str) -> None:
    """A shared library for this machine, before dlopen sees it (a damaged one can crash the process there)."""
    import platform
    import sys

    if not sys.platform.startswith("linux"):
        return
    if data[:4] != b"\x7fELF" or len(data) < 64:
        raise TunerError(
            f"{path}: {LIBRARY} is not a shared library (no ELF header)", "the package is damaged; rebuild it"
        )
    machine = int.from_bytes(data[18:20], "little")
    want = _ELF_MACHINES.get(platform.machine())
    if want is not None and machine != want:
        raise TunerError(
            f"{path}: {LIBRARY} is for another processor (ELF machine {machine}, this host is {platform.machine()})",
            "rebuild the package on (or for) this machine",
        )


def _sweep_stale_copies() -> None:
    """Remove library copies left by processes that died while loading one (a crash skips their cleanup)."""
    import shutil

    root = tempfile.gettempdir()
    try:
        names = os.listdir(root)
    except OSError:
        return
    for name in names:
        m = re.fullmatch(r"ftpkg-(\d+)-\w+", name)
        if m and not _alive(int(m.group(1))):
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists, owned by someone else
        return True
    return True
