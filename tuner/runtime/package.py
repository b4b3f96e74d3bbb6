"""The `.ftpkg` package: one zip file with the compiled library, its manifest and checksums.

Members:
  manifest.json   format version, model (file, sha256), inputs/outputs, target, TVM/tvm-ffi versions, fusion
                  strategy, kernel count, tuning-database digest, build time, and sha256 of every other member
  digest.sha256   sha256 of manifest.json's bytes: with the members' checksums inside the manifest, one digest
                  covers the whole package, and it is checked before anything is parsed or loaded
  model.so        the Relax VM executable (weights bound as constants, embedded); for a range of shapes, the build
                  over symbolic dimensions
  variants/N.so   packages for a range of shapes: the builds pinned to each tune shape (manifest `variants`)
  device/kernels.sm_XX.fatbin   CUDA packages: device code compiled at build time (tuner.runtime.device_code)

Written to a temporary file and renamed, so a failed build never leaves a half-written package.
This module must stay importable without the compiler: deployment hosts load packages with it.

Trust model: a package is native code that runs in the loading process. The digest and the schema catch damage
(a bad copy, a flipped bit, a hand-edited manifest), not an attacker, who can recompute both: load only packages
you built or trust.
"""

from __future__ import annotations

import hashlib
import json
import os
import zipfile

from tuner.core.errors import TunerError
from tuner.core.fsio import atomic_write, check_output_path, check_writable  # noqa: F401  (re-exported)

FORMAT = "fusion-tuner-package"
FORMAT_VERSION = 2  # 2: digest.sha256 and a validated manifest
LIBRARY = "model.so"
MANIFEST = "manifest.json"
DIGEST = "digest.sha256"
DTYPES = {"float16", "float32", "float64", "bfloat16", "int8", "int16", "int32", "int64", "uint8", "bool"}
MAX_DIM = 2**31 - 1


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def write_package(path: str, members: dict[str, bytes], manifest: dict) -> dict:
    manifest = dict(manifest)
    manifest["format"] = FORMAT
    manifest["format_version"] = FORMAT_VERSION
    manifest["members"] = {name: {"sha256": _sha256(data), "bytes": len(data)} for name, data in members.items()}

    manifest_bytes = json.dumps(manifest, indent=2, sort_keys=True).encode()
    validate_manifest(manifest, path)  # never write what read_package would refuse

    def write(tmp):
        with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as z:
            z.writestr(MANIFEST, manifest_bytes)
            z.writestr(DIGEST, _sha256(manifest_bytes) + "\n")
            for name, data in members.items():
                z.writestr(name, data)

    atomic_write(path, write)
    return manifest


def read_package(path: str) -> tuple[dict, dict[str, bytes]]:
    """Manifest and verified members; every problem is a TunerError naming the package. Order: the digest of the
    manifest, then the manifest's schema, then each member's checksum; nothing is loaded before all pass."""
    import stat
    import zlib

    if not os.path.exists(path):
        raise TunerError(f"{path}: no such package", "build one with `fusion-tuner compile MODEL.onnx -o model.ftpkg`")
    if not stat.S_ISREG(os.stat(path).st_mode):
        raise TunerError(
            f"{path}: is not a package file ({'a directory' if os.path.isdir(path) else 'not a regular file'})"
        )
    damaged = "the package is damaged; rebuild it"
    try:
        with zipfile.ZipFile(path) as z:
            names = set(z.namelist())
            if MANIFEST not in names:
                raise TunerError(f"{path}: not a fusion-tuner package (no {MANIFEST})")
            raw = z.read(MANIFEST)
            manifest = json.loads(raw)
            if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
                got = manifest.get("format") if isinstance(manifest, dict) else type(manifest).__name__
                raise TunerError(f"{path}: not a fusion-tuner package (format {got!r})")
            if manifest.get("format_version") != FORMAT_VERSION:
                raise TunerError(
                    f"{path}: package format version {manifest.get('format_version')!r} is not "
                    f"supported (this fusion-tuner reads {FORMAT_VERSION})",
                    "rebuild the package",
                )
            if DIGEST not in names:
                raise TunerError(f"{path}: member {DIGEST} is missing", damaged)
            if z.read(DIGEST).decode("ascii", "replace").strip() != _sha256(raw):
                raise TunerError(f"{path}: {MANIFEST} does not match its digest (edited or damaged)", damaged)
            validate_manifest(manifest, path)
            members = {}
            for name, meta in manifest["members"].items():
                if name not in names:
                    raise TunerError(f"{path}: member {name} is missing", damaged)
                data = z.read(name)
                if len(data) != meta["bytes"] or _sha256(data) != meta["sha256"]:
                    raise TunerError(f"{path}: checksum mismatch in {name}", damaged)
                members[name] = data
    except TunerError:
        raise
    except (zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error, EOFError, NotImplementedError) as err:
        raise TunerError(
            f"{path}: not a fusion-tuner package, or a damaged one ({type(err).__name__}: {err})", damaged
        ) from err
    except (ValueError, UnicodeDecodeError) as err:  # JSONDecodeError is a ValueError
        raise TunerError(f"{path}: damaged manifest ({err})", "rebuild the package") from err
    except OSError as err:
        raise TunerError(f"{path}: cannot read the package ({err.strerror or err})") from err
    if LIBRARY not in members:
        raise TunerError(f"{path}: member {LIBRARY} is missing", damaged)
    return manifest, members


def validate_manifest(m: dict, path: str) -> None:
    """The fields the loader and runner rely on, with their types and ranges."""

    def bad(field, why):
        raise TunerError(f"{path}: manifest field {field} {why}", "the package is damaged; rebuild it")

    def need(obj, key, types, where=""):
        if not isinstance(obj, dict) or key not in obj:
            bad(where + key, "is missing")
        value = obj[key]
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in _as_tuple(types)):
            bad(where + key, f"has the wrong type ({type(value).__name__})")
        return value

    model = need(m, "model", dict)
    need(model, "file", str, "model.")
    need(model, "sha256", str, "model.")
    for side in ("inputs", "outputs"):
        specs = need(m, side, list)
        if side == "outputs" and not specs:
            bad("outputs", "is empty: a package without outputs computes nothing")
        for k, spec in enumerate(specs):
            where = f"{side}[{k}]."
            need(spec, "name", str, where)
            if need(spec, "dtype", str, where) not in DTYPES:
                bad(where + "dtype", f"is {spec['dtype']!r}, not one of {', '.join(sorted(DTYPES))}")
            for d in need(spec, "shape", list, where):
                if not isinstance(d, int) or isinstance(d, bool) or not 0 <= d <= MAX_DIM:
                    bad(where + "shape", f"has {d!r}: dimensions are integers in [0, {MAX_DIM}]")
            if side == "inputs":
                _validate_shape_range(spec, where, bad)
            if "range" in spec:  # an index input's valid values (optional: packages before it lack it)
                r = spec["range"]
                if not (isinstance(r, list) and len(r) == 2 and all(type(v) is int for v in r) and r[0] <= r[1]):
                    bad(where + "range", f"is {r!r}: [lowest, highest] valid index")
    target = need(m, "target", dict)
    if need(target, "kind", str, "target.") not in ("llvm", "cuda"):
        bad("target.kind", f"is {target['kind']!r}, not llvm or cuda")
    need(target, "config", dict, "target.")
    need(target, "key", str, "target.")
    threads = m.get("num_threads")
    if threads is not None and (not isinstance(threads, int) or isinstance(threads, bool) or not 1 <= threads <= 4096):
        bad("num_threads", f"is {threads!r}: a thread count from 1 to 4096, or null")
    need(m, "tvm_version", str)
    need(m, "fusion", str)
    kernels = need(m, "kernels", int)
    if kernels < 0:
        bad("kernels", f"is {kernels}")
    for name, meta in need(m, "members", dict).items():
        need(meta, "sha256", str, f"members.{name}.")
        need(meta, "bytes", int, f"members.{name}.")
    _validate_variants(m, bad)


def _validate_shape_range(spec: dict, where: str, bad) -> None:
    """A ranged input (optional: pinned packages lack it): [lo, hi] per dimension, the shape inside it, and a
    dimension name (or null) per dimension."""
    if "shape_range" not in spec:
        return
    r, names = spec["shape_range"], spec.get("dim_names")
    ok = isinstance(r, list) and len(r) == len(spec["shape"])
    ok = ok and all(
        isinstance(d, list) and len(d) == 2 and all(type(v) is int for v in d) and 0 <= d[0] <= d[1] <= MAX_DIM
        for d in r
    )
    if not ok or not all(lo <= x <= hi for x, (lo, hi) in zip(spec["shape"], r)):
        bad(where + "shape_range", f"is {r!r}: [lowest, highest] per dimension, around shape")
    if not (isinstance(names, list) and len(names) == len(r) and all(n is None or isinstance(n, str) for n in names)):
        bad(where + "dim_names", f"is {names!r}: a name or null per dimension")


def _validate_variants(m: dict, bad) -> None:
    """Builds pinned to a tune shape (optional): each a member library and a shape per input inside its range."""
    variants = m.get("variants")
    if variants is None:
        return
    if not isinstance(variants, list):
        bad("variants", "is not a list")
    names = [i["name"] for i in m["inputs"]]
    for k, v in enumerate(variants):
        where = f"variants[{k}]."
        if not isinstance(v, dict) or v.get("library") not in m["members"]:
            bad(where + "library", "is not a member of the package")
        shapes = v.get("shapes")
        if not isinstance(shapes, dict) or sorted(shapes) != sorted(names):
            bad(where + "shapes", "does not give a shape for every input")
        for spec in m["inputs"]:
            got, r = shapes[spec["name"]], spec.get("shape_range") or [[d, d] for d in spec["shape"]]
            if not (isinstance(got, list) and len(got) == len(r)) or not all(
                type(d) is int and lo <= d <= hi for d, (lo, hi) in zip(got, r)
            ):
                bad(where + "shapes", f"gives {spec['name']} {got!r}, outside its range")


def _as_tuple(types):
    return types if isinstance(types, tuple) else (types,)
