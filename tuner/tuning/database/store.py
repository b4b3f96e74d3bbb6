"""Tuning databases: MetaSchedule's JSON files plus our provenance manifest, target-aware and kill-safe.

Where: `--db DIR`, or by default the per-user cache, `$FUSION_TUNER_CACHE` or `$XDG_CACHE_HOME/fusion-tuner`
(`~/.cache/fusion-tuner`), then `db/<model>-<sha8>/<target-key>/`: tune-model writes there, compile applies what is
there, compare names it, from any working folder.

Layout of a database folder:
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

from filelock import FileLock, Timeout

from tuner.core.errors import TunerError
from tuner.tuning.database.records import (
    RECORDS,
    WORKLOADS,
    _atomic_write_text,
    record_counts,
    repair,
    scan,
    workload_hashes,
    write_clean,
)

MANIFEST = "manifest.json"
COST_MODEL = "cost_model.tar"
LOCK = ".lock"
FORMAT = "fusion-tuner-db"


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def cache_root() -> str:
    """The per-user cache: $FUSION_TUNER_CACHE, else $XDG_CACHE_HOME/fusion-tuner, else ~/.cache/fusion-tuner."""
    explicit = os.environ.get("FUSION_TUNER_CACHE")
    if explicit:
        return explicit
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "fusion-tuner")


def default_db_dir(prepared, target_spec, root: str | None = None) -> str:
    """The model's database for this target in the cache, keyed by the model file's digest."""
    return os.path.join(
        root or os.path.join(cache_root(), "db"), f"{prepared.name}-{prepared.sha256[:8]}", target_spec.key
    )


def cached_db_dir(prepared, target_spec) -> str | None:
    """The cache's database for this model and target when one holds records, else None."""
    path = default_db_dir(prepared, target_spec)
    return path if read_manifest(path) is not None and os.path.exists(os.path.join(path, RECORDS)) else None


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

    from tuner.core.target import host_cpu_name

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


def open_database(db_dir: str, target_spec=None, create: bool = False, writer: bool = False):
    """(JSONDatabase, manifest or None, notes); refuses a folder made for another target, and records whose target
    nobody recorded. Only a writer (tuning, holding the lock) repairs the files in place; a reader that finds
    lines to drop loads a repaired copy and leaves the folder as it is."""
    import shutil
    import tempfile

    from tvm.s_tir import meta_schedule as ms

    if not os.path.isdir(db_dir):
        if not create:
            raise TunerError(f"tuning database {db_dir}: no such folder", "tune into it first with tune-model --db")
        os.makedirs(db_dir, exist_ok=True)
    manifest = read_manifest(db_dir)
    if not create and manifest is None and not os.path.exists(os.path.join(db_dir, WORKLOADS)):
        raise TunerError(f"{db_dir}: not a tuning database (no {WORKLOADS})", _where_databases_are(db_dir))
    s = scan(db_dir)
    if target_spec is not None:
        check_target(db_dir, manifest, target_spec)
        if manifest is None and s.records and not writer:
            raise TunerError(
                f"tuning database {db_dir} has records but no manifest.json: the target they were measured on is "
                "unknown, so they are not applied",
                "tune into it again with --resume (the manifest is written first), or use another --db",
            )
    source, notes = db_dir, s.notes
    if writer:
        repair(db_dir)
    elif s.dirty:
        source = tempfile.mkdtemp(prefix="ftdb-")
        write_clean(source, s)
    try:
        db = ms.database.JSONDatabase(
            os.path.join(source, WORKLOADS), os.path.join(source, RECORDS), allow_missing=True
        )
    except Exception as err:
        raise TunerError(f"tuning database {db_dir} cannot be loaded: {str(err).strip().splitlines()[-1]}") from err
    finally:
        if source != db_dir:
            shutil.rmtree(source, ignore_errors=True)  # the records are in memory now
    return db, manifest, notes


def _where_databases_are(db_dir: str) -> str:
    """A hint naming the target folders below `db_dir`, when it is the model folder above them."""
    try:
        below = sorted(d for d in os.listdir(db_dir) if os.path.exists(os.path.join(db_dir, d, WORKLOADS)))
    except OSError:
        below = []
    if below:
        return "the databases are one level down: " + ", ".join(os.path.join(db_dir, d) for d in below)
    return "tune into it first with tune-model --db"


def digest(db_dir: str) -> str:
    h = hashlib.sha256()
    for name in (WORKLOADS, RECORDS):
        path = os.path.join(db_dir, name)
        if os.path.exists(path):
            with open(path, "rb") as f:
                h.update(f.read())
    return h.hexdigest()


def apply_database(mod, target_spec, db_dir: str):
    """Apply the best records to every kernel they cover; report which kernels stayed on default schedules."""
    import tvm
    from tvm import relax

    from tuner.core.ir import is_scheduled, primfuncs

    db, manifest, notes = open_database(db_dir, target_spec)
    target = target_spec.tvm_target()
    with target, db, tvm.transform.PassContext(opt_level=3):
        applied_mod = relax.transform.MetaScheduleApplyDatabase()(mod)
    funcs = primfuncs(applied_mod)
    hand_written = {n for n, f in primfuncs(mod).items() if is_scheduled(f)}  # scheduled before any record
    tuned = sorted(n for n, f in funcs.items() if is_scheduled(f) and n not in hand_written)  # by a record
    untuned = sorted(n for n in funcs if n not in tuned and n not in hand_written)
    defaults = [] if target_spec.is_gpu else _records_of_the_default(mod, funcs, tuned, target_spec)
    info = {
        "path": db_dir,
        "digest": digest(db_dir),
        "target_key": (manifest or {}).get("target_key"),
        "kernels": len(funcs),
        "applied": len(tuned) - len(defaults),
        "untuned": untuned,
        "hand_written": sorted(hand_written),  # kernels no record applies to (tuner/tuning/tasks.py)
        "default_records": defaults,
        "repairs": notes,
    }
    return applied_mod, info


def _records_of_the_default(mod, funcs: dict, tuned: list[str], target_spec) -> list[str]:
    """The kernels whose best record is their default schedule (the seed, tuning/seed.py: no candidate beat it).
    They run as they would untuned: not counted as tuned, and not checked in the model against themselves (the
    profile's noise left such kernels out as "slower than the default")."""
    from tuner.core.ir import same_program
    from tuner.core.target import vector_lanes
    from tuner.schedule.default_schedule import default_schedule

    target, lanes = target_spec.tvm_target(), vector_lanes(target_spec)
    out = []
    for name in tuned:
        default = default_schedule(mod[name], target, lanes)
        if default is not None and same_program(default, funcs[name]):
            out.append(name)
    return out


def merge(sources: list[str], dst: str) -> dict:
    """Merge databases of one target into dst, deduplicating identical records."""

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
    if os.path.isdir(dst) and os.listdir(dst) and not os.path.exists(os.path.join(dst, WORKLOADS)):
        raise TunerError(f"db merge: {dst} is a folder that is not a tuning database", "name a new folder for -o")
    os.makedirs(dst, exist_ok=True)
    lock = FileLock(os.path.join(dst, LOCK))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        raise TunerError(f"db merge: {dst} is in use by a tune-model run", "wait for it to finish") from None
    try:
        return _merge_locked(manifests, dst, dst_manifest, sources)
    finally:
        lock.release()


def _merge_locked(manifests, dst, dst_manifest, sources) -> dict:
    from tvm.s_tir import meta_schedule as ms

    repair(dst)
    out = ms.database.JSONDatabase(os.path.join(dst, WORKLOADS), os.path.join(dst, RECORDS), allow_missing=True)
    seen = set()
    for rec in out.get_all_tuning_records():
        seen.add(_record_key(rec))
    added = dup = 0
    for src, _ in manifests:
        db, _, _ = open_database(src)  # read-only: a source is never rewritten
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
    if not os.path.exists(os.path.join(db_dir, WORKLOADS)):
        raise TunerError(f"{db_dir}: not a tuning database (no {WORKLOADS})", _where_databases_are(db_dir))
    manifest = read_manifest(db_dir) or {}
    notes = scan(db_dir).notes  # read-only: what a tuning run would drop; nothing is written here
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


def save_progress(db_dir, manifest, states, model_key, fusion, wall, cost_model, knobs, wall_before):
    """The run's task states and wall time into the manifest, and the cost model once it is trained."""
    manifest.setdefault("tasks", {})
    for st in states:
        manifest["tasks"][st.name] = {
            "workload_hash": st.workload_hash,
            "trials": st.trials,
            "best_ms": st.best_ms,
            "flops": st.flops,
            "weight": st.weight,
        }
    manifest.setdefault("models", {})[model_key] = {
        "fusion": fusion,
        "tasks": [s.name for s in states],
        "updated": now(),
    }
    manifest["wall_seconds"] = wall_before + wall  # all runs into this database
    manifest["last_run_seconds"] = wall
    write_manifest(db_dir, manifest)
    # TVM 0.27's XGBModel.load fails on a file saved before its first training (no booster inside): a kill
    # right after the seeds left one, and the resume crashed. Save only a trained model.
    if knobs.cost_model == "xgb" and getattr(cost_model, "booster", None) is not None:
        tmp = os.path.join(db_dir, f".cost_model.{os.getpid()}.tar")
        try:
            cost_model.save(tmp)
            os.replace(tmp, os.path.join(db_dir, COST_MODEL))
        except Exception:
            if os.path.exists(tmp):
                os.unlink(tmp)
