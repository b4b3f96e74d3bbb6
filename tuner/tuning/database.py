"""Tuning databases: MetaSchedule's JSON files plus our provenance manifest, target-aware and kill-safe.

Layout of a database folder (default `logs/<model>-<sha8>/<target-key>/`):
  database_workload.json       MetaSchedule: a line per workload (structural hash, serialized TIR)
  database_tuning_record.json  MetaSchedule: a line per measured candidate (workload index, trace, run_secs, ...)
  manifest.json                ours: TVM/tvm-ffi versions, full target and key, host, fusion, per-task trials and
                               best latency, models tuned into it, wall time, dates
  cost_model.tar               the XGBoost cost model after the last round (resume starts from it)
  .lock                        held by the process tuning into the folder

MetaSchedule appends a line per record, so a SIGKILL can leave a truncated last line: `repair()` drops it (and
reports it) before the files are opened. Records are only ever applied to the target the folder was made for.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os

from ..errors import TunerError

WORKLOADS = "database_workload.json"
RECORDS = "database_tuning_record.json"
MANIFEST = "manifest.json"
COST_MODEL = "cost_model.tar"
LOCK = ".lock"
FORMAT = "fusion-tuner-db"


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def default_db_dir(prepared, target_spec, root: str = "logs") -> str:
    return os.path.join(root, f"{prepared.name}-{prepared.sha256[:8]}", target_spec.key)


def _atomic_write_text(path: str, text: str) -> None:
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def repair(db_dir: str) -> list[str]:
    """Drop unparsable lines (a truncated tail after a kill) and records of missing workloads. Returns notes."""
    notes = []
    counts = {}
    for name in (WORKLOADS, RECORDS):
        path = os.path.join(db_dir, name)
        if not os.path.exists(path):
            open(path, "a").close()
            counts[name] = 0
            continue
        with open(path) as f:
            lines = f.read().split("\n")
        good, bad = [], 0
        for line in lines:
            if not line.strip():
                continue
            try:
                json.loads(line)
                good.append(line)
            except json.JSONDecodeError:
                bad += 1
        if name == RECORDS:
            n_workloads = counts[WORKLOADS]
            kept = [ln for ln in good if json.loads(ln)[0] < n_workloads]
            if len(kept) != len(good):
                notes.append(f"{name}: dropped {len(good) - len(kept)} record(s) of workloads that were never written")
            good = kept
        counts[name] = len(good)
        if bad or (lines and lines[-1].strip()):
            if bad:
                notes.append(f"{name}: dropped {bad} truncated or unparsable line(s) (an interrupted write)")
            _atomic_write_text(path, "".join(ln + "\n" for ln in good))
        elif len(good) != sum(1 for ln in lines if ln.strip()):
            _atomic_write_text(path, "".join(ln + "\n" for ln in good))
    return notes


def read_manifest(db_dir: str) -> dict | None:
    path = os.path.join(db_dir, MANIFEST)
    if not os.path.exists(path):
        return None
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, json.JSONDecodeError) as err:
        raise TunerError(f"{path}: unreadable manifest ({err})", "restore it or remove the folder") from err


def write_manifest(db_dir: str, manifest: dict) -> None:
    manifest["updated"] = now()
    _atomic_write_text(os.path.join(db_dir, MANIFEST), json.dumps(manifest, indent=2, sort_keys=True))


def new_manifest(target_spec, fusion: str) -> dict:
    import tvm
    import tvm_ffi

    from ..target import host_cpu_name

    return {
        "format": FORMAT,
        "tvm_version": tvm.__version__,
        "tvm_ffi_version": tvm_ffi.__version__,
        "target": target_spec.to_json(),
        "target_key": target_spec.key,
        "num_threads": target_spec.config.get("num-cores"),  # TVM_NUM_THREADS the runner measured with
        "target_str": str(target_spec.tvm_target()),
        "host": host_cpu_name(),
        "fusion": fusion,
        "tasks": {},
        "models": {},
        "wall_seconds": 0.0,
        "created": now(),
    }


def check_target(db_dir: str, manifest: dict | None, target_spec) -> None:
    if manifest and manifest.get("target_key") != target_spec.key:
        raise TunerError(
            f"tuning database {db_dir} holds records for {manifest.get('target_key')}, not for "
            f"{target_spec.key}; they are not applied to another target",
            f"tune for {target_spec.key} into another folder, or build with --target matching the database",
        )


def open_database(db_dir: str, target_spec=None, create: bool = False):
    """(JSONDatabase, manifest or None, repair notes); refuses a folder made for another target."""
    from tvm.s_tir import meta_schedule as ms

    if not os.path.isdir(db_dir):
        if not create:
            raise TunerError(f"tuning database {db_dir}: no such folder", "tune into it first with tune-model --db")
        os.makedirs(db_dir, exist_ok=True)
    manifest = read_manifest(db_dir)
    if not create and manifest is None and not os.path.exists(os.path.join(db_dir, WORKLOADS)):
        raise TunerError(f"{db_dir}: not a tuning database (no {WORKLOADS})")
    if target_spec is not None:
        check_target(db_dir, manifest, target_spec)
    notes = repair(db_dir)
    try:
        db = ms.database.JSONDatabase(
            os.path.join(db_dir, WORKLOADS), os.path.join(db_dir, RECORDS), allow_missing=True
        )
    except Exception as err:
        raise TunerError(f"tuning database {db_dir} cannot be loaded: {str(err).strip().splitlines()[-1]}") from err
    return db, manifest, notes


def digest(db_dir: str) -> str:
    h = hashlib.sha256()
    for name in (WORKLOADS, RECORDS):
        path = os.path.join(db_dir, name)
        if os.path.exists(path):
            with open(path, "rb") as f:
                h.update(f.read())
    return h.hexdigest()


def record_counts(db_dir: str) -> dict[int, dict]:
    """workload index -> {trials, best_s} straight from the record file (invalid runs count as trials)."""
    out: dict[int, dict] = {}
    path = os.path.join(db_dir, RECORDS)
    if not os.path.exists(path):
        return out
    with open(path) as f:
        for line in f:
            if not line.strip():
                continue
            try:
                idx, rec = json.loads(line)
            except (json.JSONDecodeError, ValueError):
                continue
            entry = out.setdefault(idx, {"trials": 0, "best_s": None})
            entry["trials"] += 1
            run_secs = rec[1] if len(rec) > 1 else None
            if run_secs:
                mean = sum(float(x) for x in run_secs) / len(run_secs)
                if mean < 1e9 and (entry["best_s"] is None or mean < entry["best_s"]):
                    entry["best_s"] = mean
    return out


def workload_hashes(db_dir: str) -> list[str]:
    path = os.path.join(db_dir, WORKLOADS)
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line)[0] for line in f if line.strip()]


def apply_database(mod, target_spec, db_dir: str):
    """Apply the best records to every kernel they cover; report which kernels stayed on default schedules."""
    import tvm
    from tvm import relax

    from ..ir import primfuncs

    db, manifest, notes = open_database(db_dir, target_spec)
    target = target_spec.tvm_target()
    with target, db, tvm.transform.PassContext(opt_level=3):
        applied_mod = relax.transform.MetaScheduleApplyDatabase()(mod)
    funcs = primfuncs(applied_mod)
    tuned = sorted(n for n, f in funcs.items() if f.attrs is not None and "tirx.is_scheduled" in f.attrs)
    untuned = sorted(n for n in funcs if n not in tuned)
    info = {
        "path": db_dir,
        "digest": digest(db_dir),
        "target_key": (manifest or {}).get("target_key"),
        "kernels": len(funcs),
        "applied": len(tuned),
        "untuned": untuned,
        "repairs": notes,
    }
    return applied_mod, info


def merge(sources: list[str], dst: str) -> dict:
    """Merge databases of one target into dst, deduplicating identical records."""
    from tvm.s_tir import meta_schedule as ms

    manifests = []
    for src in sources:
        m = read_manifest(src)
        if not os.path.exists(os.path.join(src, WORKLOADS)):
            raise TunerError(f"{src}: not a tuning database (no {WORKLOADS})")
        manifests.append((src, m))
    keys = {m.get("target_key") for _, m in manifests if m}
    if len(keys) > 1:
        raise TunerError(
            "db merge: the sources are for different targets: "
            + ", ".join(f"{s} ({m.get('target_key')})" for s, m in manifests if m),
            "merge databases of one target only",
        )
    dst_manifest = read_manifest(dst) if os.path.isdir(dst) else None
    if dst_manifest and keys and dst_manifest.get("target_key") not in keys:
        raise TunerError(f"db merge: {dst} is for {dst_manifest.get('target_key')}, the sources for {keys.pop()}")
    os.makedirs(dst, exist_ok=True)
    repair(dst)
    out = ms.database.JSONDatabase(os.path.join(dst, WORKLOADS), os.path.join(dst, RECORDS), allow_missing=True)
    seen = set()
    for rec in out.get_all_tuning_records():
        seen.add(_record_key(rec))
    added = dup = 0
    for src, _ in manifests:
        repair(src)
        db = ms.database.JSONDatabase(os.path.join(src, WORKLOADS), os.path.join(src, RECORDS), allow_missing=True)
        for rec in db.get_all_tuning_records():
            key = _record_key(rec)
            if key in seen:
                dup += 1
                continue
            seen.add(key)
            workload = out.commit_workload(rec.workload.mod)
            out.commit_tuning_record(
                ms.database.TuningRecord(rec.trace, workload, rec.run_secs, rec.target, rec.args_info)
            )
            added += 1
    merged = dst_manifest or dict(next((m for _, m in manifests if m), None) or {"format": FORMAT})
    merged.setdefault("tasks", {})
    merged.setdefault("models", {})
    for _, m in manifests:
        if m:
            for k, v in m.get("models", {}).items():
                merged["models"].setdefault(k, v)
            for k, v in m.get("tasks", {}).items():
                merged["tasks"].setdefault(k, v)
    merged["merged_from"] = sorted(set(merged.get("merged_from", [])) | set(sources))
    write_manifest(dst, merged)
    return {"added": added, "duplicates": dup, "records": len(seen), "db": dst}


def _record_key(rec) -> str:

    return json.dumps(
        [
            str(__import__("tvm_ffi").structural_hash(rec.workload.mod)),
            str(rec.trace.as_json()),
            [round(float(x), 12) for x in (rec.run_secs or [])],
        ],
        sort_keys=True,
        default=str,
    )


def show(db_dir: str) -> dict:
    manifest = read_manifest(db_dir) or {}
    notes = repair(db_dir) if os.path.isdir(db_dir) else []
    if not os.path.exists(os.path.join(db_dir, WORKLOADS)):
        raise TunerError(f"{db_dir}: not a tuning database (no {WORKLOADS})")
    counts = record_counts(db_dir)
    hashes = workload_hashes(db_dir)
    by_hash = {t.get("workload_hash"): name for name, t in manifest.get("tasks", {}).items()}
    tasks = []
    for idx, h in enumerate(hashes):
        c = counts.get(idx, {"trials": 0, "best_s": None})
        name = by_hash.get(h, f"workload_{idx}")
        flops = manifest.get("tasks", {}).get(name, {}).get("flops")
        best_ms = c["best_s"] * 1e3 if c["best_s"] else None
        tasks.append(
            {
                "task": name,
                "trials": c["trials"],
                "best_ms": best_ms,
                "flops": flops,
                "gflops": (flops / c["best_s"] / 1e9) if flops and c["best_s"] else None,
            }
        )
    return {
        "db": db_dir,
        "target": manifest.get("target_key"),
        "tvm_version": manifest.get("tvm_version"),
        "host": manifest.get("host"),
        "fusion": manifest.get("fusion"),
        "models": manifest.get("models", {}),
        "workloads": len(hashes),
        "records": sum(c["trials"] for c in counts.values()),
        "tasks": tasks,
        "wall_seconds": manifest.get("wall_seconds"),
        "repairs": notes,
    }
