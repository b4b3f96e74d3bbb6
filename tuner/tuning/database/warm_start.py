"""Warm start from `schedules/`: curated tuning databases keyed by target (TVM's old TopHub idea).

    schedules/<target-key>/        a tuning database (manifest, workloads, best records, cost model), its two
                                   JSON files xz-compressed (serialized TIR compresses ~50x: git stays small)

`tune-model` copies the best records of every kernel the library already knows into the new database before its
first round, and starts from the library's XGBoost cost model: evolutionary search then begins from those
schedules (MetaSchedule seeds its population from the database's best records) and the rounds go to the kernels
the library does not cover. Records are only ever taken from the folder of this exact target key: a Zen 4
(AVX-512) schedule is not valid on Zen 3.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field

from tuner.core.errors import TunerError
from tuner.tuning.database import store as D

# the repository's curated library; FUSION_TUNER_SCHEDULES points elsewhere (an installed package has none)
LIBRARY = os.path.join(os.path.abspath(__file__).rsplit(os.sep + "tuner" + os.sep, 1)[0], "schedules")
TOP_K = 2  # records per workload: the best, and a runner-up the search may start from


@dataclass
class WarmStart:
    source: str | None
    workloads: int = 0
    records: int = 0
    cost_model: bool = False
    hashes: set = field(default_factory=set)  # structural hashes of the kernels started from the library

    def to_json(self) -> dict:
        return {
            "source": self.source,
            "workloads": self.workloads,
            "records": self.records,
            "cost_model": self.cost_model,
        }


def resolve_schedules(schedules: str | None, target_spec) -> str | None:
    """The database folder to warm-start from: `auto` -> the library's folder for this target key when it exists;
    `none` -> nothing; a path -> that database (or its `<target-key>` subfolder)."""
    if schedules in (None, "", "none"):
        return None
    if schedules == "auto":
        root = os.environ.get("FUSION_TUNER_SCHEDULES") or LIBRARY
        folder = os.path.join(root, target_spec.key)
        return folder if _is_database(folder) else nearest_library(root, target_spec)
    for folder in (os.path.join(schedules, target_spec.key), schedules):
        if _is_database(folder):
            return folder
    raise TunerError(
        f"--schedules {schedules}: no tuning database for {target_spec.key} there",
        f"give a database folder, or a library folder with a {target_spec.key}/ subfolder",
    )


def nearest_library(root: str, target_spec) -> str | None:
    """A library key for another CPU of the same vector ISA, when this target has none: the CPU runs every
    instruction that CPU's schedules use, at the same vector width (an AVX-512 library for an emeraldrapids host
    that has only rocketlake's). Same core count first; ties by name. The in-model check still drops any record
    that is slower here than the default schedule."""
    from tuner.core.target import host_cpu_flags, required_cpu_features

    if target_spec.kind != "llvm" or not os.path.isdir(root):
        return None
    mine = set(required_cpu_features(target_spec.config.get("mcpu", "")))
    host = set(host_cpu_flags())
    fits = []
    for key in sorted(os.listdir(root)):
        manifest = D.read_manifest(os.path.join(root, key)) if _is_database(os.path.join(root, key)) else None
        target = (manifest or {}).get("target") or {}
        if target.get("kind") != "llvm":
            continue
        theirs = set(required_cpu_features(target.get("config", {}).get("mcpu", "")))
        if theirs and theirs == mine and theirs <= host:
            same_cores = target.get("config", {}).get("num-cores") == target_spec.config.get("num-cores")
            fits.append((not same_cores, key))
    return os.path.join(root, min(fits)[1]) if fits else None


def source_target(source: str, target_spec):
    """The target a warm-start source was tuned for: this one, or a same-ISA library's (nearest_library)."""
    from tuner.core.target import TargetSpec

    manifest = D.read_manifest(source)
    if manifest and manifest.get("target_key") != target_spec.key and manifest.get("target"):
        return TargetSpec(**manifest["target"])
    return target_spec


def _is_database(folder: str) -> bool:
    return any(os.path.exists(os.path.join(folder, D.WORKLOADS + ext)) for ext in ("", XZ))


XZ = ".xz"


def _opened(source: str, tmp: str) -> str:
    """A folder JSONDatabase can open: the source itself, or its xz-compressed files expanded into `tmp`."""
    import lzma

    if not os.path.exists(os.path.join(source, D.WORKLOADS + XZ)):  # a database; a library is compressed
        return source
    for name in os.listdir(source):
        src = os.path.join(source, name)
        if name.endswith(XZ):
            with lzma.open(src) as f_in, open(os.path.join(tmp, name[: -len(XZ)]), "wb") as f_out:
                shutil.copyfileobj(f_in, f_out)
        elif os.path.isfile(src):
            shutil.copyfile(src, os.path.join(tmp, name))
    return tmp


def warm_start(db, db_dir: str, tasks, source: str | None, target_spec) -> WarmStart:
    """Copy the source's best records for `tasks` (MetaSchedule ExtractedTasks) into `db`, and its cost model
    when `db_dir` has none. Kernels the database already has records for are left as they are (a resume)."""

    import tempfile

    out = WarmStart(source)
    if source is None:
        return out
    with tempfile.TemporaryDirectory(prefix="ft-warm-") as tmp:
        return _copy_best(db, db_dir, tasks, _opened(source, tmp), target_spec, out)


def _copy_best(db, db_dir, tasks, source, target_spec, out: WarmStart) -> WarmStart:
    import tvm_ffi
    from tvm.s_tir import meta_schedule as ms

    # refuses another target's folder; a same-ISA library (nearest_library) is opened as its own target's
    src, _, _ = D.open_database(source, source_target(source, target_spec))
    for task in tasks:
        mod = task.dispatched[0]
        if not src.has_workload(mod) or (db.has_workload(mod) and db.get_top_k(db.commit_workload(mod), 1)):
            continue
        best = src.get_top_k(src.commit_workload(mod), TOP_K)  # has_workload: commit only looks it up
        if not best:
            continue
        workload = db.commit_workload(mod)
        for rec in best:
            db.commit_tuning_record(
                ms.database.TuningRecord(rec.trace, workload, rec.run_secs, rec.target, rec.args_info)
            )
        out.workloads += 1
        out.records += len(best)
        out.hashes.add(str(tvm_ffi.structural_hash(mod)))
    model_src, model_dst = os.path.join(source, D.COST_MODEL), os.path.join(db_dir, D.COST_MODEL)
    if os.path.exists(model_src) and not os.path.exists(model_dst):
        shutil.copyfile(model_src, model_dst + ".tmp")
        os.replace(model_dst + ".tmp", model_dst)
        out.cost_model = True
    return out


def curate(sources: list[str], dst: str, top_k: int = TOP_K) -> dict:
    """Write the best `top_k` records per workload of `sources` (one target) into a new library folder `dst`,
    with the cost model of the source that has the most records."""

    from tuner.core.target import TargetSpec

    manifests = [D.read_manifest(src) for src in sources]
    keys = {m.get("target_key") if m else None for m in manifests}
    if None in keys or len(keys) != 1:
        raise TunerError(
            "db curate: "
            + ", ".join(f"{s} ({m.get('target_key') if m else 'no manifest'})" for s, m in zip(sources, manifests)),
            "curate databases of one target, each with its manifest.json",
        )
    target_spec = TargetSpec(**manifests[0]["target"])
    if top_k < 1:
        raise TunerError("db curate --top-k must be >= 1")
    if os.path.exists(dst) and os.listdir(dst):
        raise TunerError(f"{dst} exists and is not empty", "curate into a new folder, then replace the old one")
    os.makedirs(dst, exist_ok=True)
    import tempfile

    with tempfile.TemporaryDirectory(prefix="ft-curate-") as tmp:
        # a curated library among the sources (re-curating schedules/ with new databases) is xz-compressed:
        # expanded first, or its records would be silently left out
        opened = []
        for k, src in enumerate(sources):
            os.makedirs(os.path.join(tmp, f"src{k}"))
            opened.append(_opened(src, os.path.join(tmp, f"src{k}")))
        out = os.path.join(tmp, "out")
        os.makedirs(out)
        doc = _curate_into(opened, out, target_spec, top_k, names=sources)
        for name in (D.WORKLOADS, D.RECORDS):
            _xz(os.path.join(out, name), os.path.join(dst, name + XZ))
        for name in (D.MANIFEST, D.COST_MODEL):
            if os.path.exists(os.path.join(out, name)):
                shutil.copyfile(os.path.join(out, name), os.path.join(dst, name))
    return {**doc, "db": dst, "bytes": sum(os.path.getsize(os.path.join(dst, n)) for n in os.listdir(dst))}


def _xz(src: str, dst: str) -> None:
    import lzma

    with open(src, "rb") as f_in, lzma.open(dst, "wb", preset=9) as f_out:
        shutil.copyfileobj(f_in, f_out)


def _curate_into(sources, dst, target_spec, top_k, names=None) -> dict:
    """`names`: the sources as the user named them (`sources` may be their expanded copies)."""
    import tvm_ffi
    from tvm.s_tir import meta_schedule as ms

    out = ms.database.JSONDatabase(os.path.join(dst, D.WORKLOADS), os.path.join(dst, D.RECORDS), allow_missing=True)
    best: dict[str, list] = {}
    sizes = {}
    for src in sources:
        db, _, _ = D.open_database(src, target_spec)
        records = db.get_all_tuning_records()
        sizes[src] = len(records)
        for rec in records:
            if not rec.run_secs or min(float(x) for x in rec.run_secs) >= 1e9:  # 1e10: a failed measurement
                continue
            key = str(tvm_ffi.structural_hash(rec.workload.mod))
            best.setdefault(key, []).append(rec)
    n = 0
    for recs in best.values():
        recs.sort(key=lambda r: sum(float(x) for x in r.run_secs) / len(r.run_secs))
        workload = out.commit_workload(recs[0].workload.mod)
        for rec in recs[:top_k]:
            out.commit_tuning_record(
                ms.database.TuningRecord(rec.trace, workload, rec.run_secs, rec.target, rec.args_info)
            )
            n += 1
    manifest = D.new_manifest(target_spec, "any")
    manifest["curated_from"] = sorted(names or sources)
    D.write_manifest(dst, manifest)
    richest = max(sizes, key=sizes.get) if sizes else None
    if richest and os.path.exists(os.path.join(richest, D.COST_MODEL)):
        shutil.copyfile(os.path.join(richest, D.COST_MODEL), os.path.join(dst, D.COST_MODEL))
    return {"workloads": len(best), "records": n, "db": dst, "target_key": target_spec.key}
