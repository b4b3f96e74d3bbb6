"""The `.ftpkg` package: one zip file with the compiled library, its manifest and checksums.

Members:
  manifest.json   format version, model (file, sha256), inputs/outputs, target, TVM/tvm-ffi versions, fusion
                  strategy, kernel count, tuning-database digest, build time, and sha256 of every other member
  model.so        the Relax VM executable (weights bound as constants, embedded)
  device/kernels.sm_XX.fatbin   CUDA packages: device code compiled at build time (tuner.runtime.device_code)

Written to a temporary file and renamed, so a failed build never leaves a half-written package.
This module must stay importable without the compiler: deployment hosts load packages with it.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import zipfile

from ..errors import TunerError

FORMAT = "fusion-tuner-package"
FORMAT_VERSION = 1
LIBRARY = "model.so"
MANIFEST = "manifest.json"


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def atomic_write(path: str, write) -> None:
    """Call write(tmp_path), fsync, then rename onto path (the one atomic writer of the project); the target
    folder must be writable."""
    directory = os.path.dirname(os.path.abspath(path)) or "."
    if not os.path.isdir(directory):
        raise TunerError(f"{path}: folder {directory} does not exist", "create it first or choose another -o")
    if os.path.isdir(path):
        raise TunerError(f"{path}: is a directory", "give a file name, e.g. -o model.ftpkg")
    try:
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=os.path.basename(path), dir=directory)
    except OSError as err:
        raise TunerError(f"{path}: cannot write to {directory} ({err.strerror})", "choose a writable -o") from err
    os.close(fd)
    try:
        write(tmp)
        with open(tmp, "rb") as f:  # on disk before the rename makes it visible
            os.fsync(f.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; give the file the mode a plain open() would
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def check_writable(path: str) -> None:
    """Fail before a long build rather than after it."""
    directory = os.path.dirname(os.path.abspath(path)) or "."
    if os.path.isdir(path):
        raise TunerError(f"{path}: is a directory", "give a file name, e.g. -o model.ftpkg")
    if not os.path.isdir(directory):
        raise TunerError(f"{path}: folder {directory} does not exist", "create it first or choose another -o")
    if not os.access(directory, os.W_OK):
        raise TunerError(f"{path}: folder {directory} is not writable", "choose a writable -o")


def write_package(path: str, members: dict[str, bytes], manifest: dict) -> dict:
    manifest = dict(manifest)
    manifest["format"] = FORMAT
    manifest["format_version"] = FORMAT_VERSION
    manifest["members"] = {name: {"sha256": _sha256(data), "bytes": len(data)} for name, data in members.items()}

    def write(tmp):
        with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as z:
            z.writestr(MANIFEST, json.dumps(manifest, indent=2, sort_keys=True))
            for name, data in members.items():
                z.writestr(name, data)

    atomic_write(path, write)
    return manifest


def read_package(path: str) -> tuple[dict, dict[str, bytes]]:
    """Manifest and verified members; every problem is a TunerError naming the package."""
    if not os.path.exists(path):
        raise TunerError(f"{path}: no such package", "build one with `fusion-tuner compile MODEL.onnx -o model.ftpkg`")
    try:
        with zipfile.ZipFile(path) as z:
            names = set(z.namelist())
            if MANIFEST not in names:
                raise TunerError(f"{path}: not a fusion-tuner package (no {MANIFEST})")
            manifest = json.loads(z.read(MANIFEST))
            if manifest.get("format") != FORMAT:
                raise TunerError(f"{path}: not a fusion-tuner package (format {manifest.get('format')!r})")
            if manifest.get("format_version") != FORMAT_VERSION:
                raise TunerError(
                    f"{path}: package format version {manifest.get('format_version')} is not "
                    f"supported (this fusion-tuner reads {FORMAT_VERSION})",
                    "rebuild the package",
                )
            members = {}
            for name, meta in manifest.get("members", {}).items():
                if name not in names:
                    raise TunerError(f"{path}: member {name} is missing", "the package is damaged; rebuild it")
                data = z.read(name)
                if _sha256(data) != meta["sha256"]:
                    raise TunerError(f"{path}: checksum mismatch in {name}", "the package is damaged; rebuild it")
                members[name] = data
    except zipfile.BadZipFile as err:
        raise TunerError(f"{path}: not a fusion-tuner package ({err})", "the file is damaged or not a .ftpkg") from err
    except (KeyError, ValueError) as err:
        raise TunerError(f"{path}: damaged manifest ({err})", "rebuild the package") from err
    if LIBRARY not in members:
        raise TunerError(f"{path}: member {LIBRARY} is missing", "the package is damaged; rebuild it")
    return manifest, members
