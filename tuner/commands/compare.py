"""The `compare` command's work: build every variant, measure it, and write the report.

Fair by construction: all variants come from one prepared model and run on the same inputs; untuned variants
use default schedules; tuned variants get the same trial budget each (`trials`, one database per strategy,
so the unfused kernels are tuned too) or the same shared database (`db`). Latency is measured interleaved.
A variant that fails to build or verify is reported with its error; the others still are.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass, field

from tuner.core.errors import TunerError


@dataclass
class Variant:
    name: str  # e.g. "tvm" or "tvm/tuned"
    strategy: str
    tuned: bool
    status: str = "ok"  # ok | failed
    error: str | None = None
    build: object = None  # BuildResult
    static: object = None  # StaticMetrics
    doc: dict = field(default_factory=dict)
    labels: dict = field(default_factory=dict)  # kernel -> {"onnx_ops", "onnx_nodes"}


def parse_strategies(text: str | None) -> list[str]:
    """Validate every name before any build; the default compares `none` with TVM's grouping."""
    from tuner.fusion import get_strategy

    names = [s.strip() for s in (text or "none,tvm").split(",") if s.strip()]
    if not names:
        raise TunerError("--fusion: give at least one strategy, e.g. none,tvm")
    for n in names:
        get_strategy(n)  # raises with the known names
    if len(set(names)) != len(names):
        raise TunerError(f"--fusion {text}: a strategy is listed twice")
    return names


def prepare_output_dir(path: str, force: bool, dry_run: bool = False) -> None:
    if os.path.exists(path) and not os.path.isdir(path):
        raise TunerError(f"-o {path}: exists and is not a folder")
    if os.path.isdir(path) and os.listdir(path):
        if not force:
            raise TunerError(
                f"output folder {path} exists and is not empty", "pass --force to replace it, or choose another -o"
            )
        if dry_run:
            return
        shutil.rmtree(path)
    if dry_run:
        return
    os.makedirs(path, exist_ok=True)


def _one_shape(shapes, log) -> dict:
    """The shapes the report measures: a range at its middle, said in the log."""
    from tuner.core.shapes import pinned_for_report

    shapes, note = pinned_for_report(shapes)
    if note:
        log(note)
    return shapes


def _say_cached_db(prepared, spec, log) -> None:
    from tuner.tuning.database.store import cached_db_dir

    cached = cached_db_dir(prepared, spec)
    if cached:
        log(f"untuned variants; the cache holds this model's tuning database: --db {cached} compares tuned builds")


def _check_options(spec, db, trials, repeat, ort, runs_here) -> None:
    """Refuse inconsistent options before any work."""
    if db and trials:
        raise TunerError(
            "give --db or --trials, not both",
            "--db applies one shared database to every variant; --trials tunes each variant with that budget",
        )
    if trials is not None and trials <= 0:
        raise TunerError("--trials must be > 0")
    if repeat < 3:
        raise TunerError("--repeat must be >= 3 (percentiles need a few runs)")
    if db:
        from tuner.tuning.database.store import open_database

        open_database(db, spec)  # wrong target or missing folder: refuse before building
    if not runs_here and ort:
        raise TunerError("--ort needs the variants to run here, and there is no GPU")


def compare(
    model: str,
    output_dir: str,
    target: str = "auto",
    fusion: str | None = None,
    db: str | None = None,
    trials: int | None = None,
    ort: bool = False,
    repeat: int = 20,
    shapes=None,
    consts=None,
    force: bool = False,
    peak_gflops: float | None = None,
    peak_gbps: float | None = None,
    log=print,
    precision: str | None = None,
) -> dict:
    from tuner.core.target import detect_gpu_arch, resolve_target
    from tuner.frontend.onnx_model import prepare_model
    from tuner.report.documents import write_report

    strategies = parse_strategies(fusion)
    db = None if db and db.lower() == "none" else db
    spec = resolve_target(target)
    runs_here = not spec.is_gpu or bool(detect_gpu_arch())
    _check_options(spec, db, trials, repeat, ort, runs_here)
    prepare_output_dir(output_dir, force, dry_run=True)  # refuse before any work
    if spec.config.get("num-cores"):
        os.environ.setdefault("TVM_NUM_THREADS", str(spec.config["num-cores"]))
    t_start = time.perf_counter()
    shapes = _one_shape(shapes, log)
    prepared = prepare_model(model, shapes, consts, precision=precision)
    prepare_output_dir(output_dir, force)
    if not db and not trials:
        _say_cached_db(prepared, spec, log)
    log(
        f"compare {prepared.name} on {spec.key}: {', '.join(strategies)}"
        + (f", tuned with {trials} trials each" if trials else f", tuned from {db}" if db else ", untuned")
    )

    variants: list[Variant] = []
    for s in strategies:
        paired = bool(trials or db)  # untuned and tuned side by side: name both
        lowered = {}  # each strategy is imported and lowered once, for both of its variants and its tuning
        variants.append(
            _build_variant(
                prepared, spec, s, f"{s}/untuned" if paired else s, tuned=False, db=None, log=log, lowered=lowered
            )
        )
        if paired:
            vdb = db or os.path.join(output_dir, "db", s.replace("+", "_"))
            variants.append(
                _build_variant(
                    prepared, spec, s, f"{s}/tuned", tuned=True, db=vdb, trials=trials, log=log, lowered=lowered
                )
            )

    from tuner.report.machine import machine_limits

    limits = machine_limits(spec, peak_gflops, peak_gbps, measure_launch=runs_here)
    measured = _measure(prepared, variants, spec, repeat, ort, runs_here, log) if runs_here else {}
    doc = _document(
        prepared,
        spec,
        strategies,
        variants,
        limits,
        measured,
        trials,
        db,
        repeat,
        time.perf_counter() - t_start,
        runs_here,
    )
    write_report(doc, output_dir)
    log(doc["verdict"])
    return doc


def _build_variant(
    prepared, spec, strategy_name, name: str, tuned: bool, db, log, trials=None, lowered=None
) -> Variant:
    """Build one variant; `lowered` caches the strategy's lowered module across its variants."""
    from tuner.build.executable import build_lowered, lower_prepared
    from tuner.fusion import get_strategy
    from tuner.report.kernels import static_metrics

    v = Variant(name, strategy_name, tuned)
    t0 = time.perf_counter()
    try:
        if "module" not in lowered:
            lowered["module"] = lower_prepared(prepared, spec, get_strategy(strategy_name))
        if tuned and trials:
            _tune(lowered["module"], db, trials)
        v.build = build_lowered(lowered["module"], db if tuned else None)
        v.static = static_metrics(v.build.fused_mod, spec.tvm_target())
        v.doc["tuned_kernels"] = v.build.db_info["applied"] if v.build.db_info else 0
        v.doc["default_schedule_kernels"] = (
            sorted({*v.build.db_info["untuned"], *v.build.db_info.get("default_records", ())})
            if v.build.db_info
            else sorted({k.kernel for k in v.static.kernels})
        )
        # searched, and no candidate beat the default schedule: its record is the default
        v.doc["default_record_kernels"] = v.build.db_info.get("default_records", []) if v.build.db_info else []
        v.labels = _onnx_labels(prepared, spec, strategy_name, lowered["module"].layout, v.static.kernels)
    except TunerError as err:
        v.status, v.error = "failed", err.message
    except Exception as err:  # a build bug in one variant must not lose the others
        v.status, v.error = (
            "failed",
            f"{type(err).__name__}: {str(err).strip().splitlines()[-1] if str(err).strip() else ''}",
        )
    v.doc["build_s"] = round(time.perf_counter() - t0, 2)
    log(
        f"  {name}: "
        + (f"{v.static.launches} kernels, built in {v.doc['build_s']} s" if v.status == "ok" else f"FAILED: {v.error}")
    )
    return v


def _onnx_labels(prepared, spec, strategy_name, layout, kernels) -> dict:
    """{kernel: {"onnx_ops", "onnx_nodes"}} from the strategy's fusion plan (tuner.plan.attribution); empty when
    the plan cannot be matched (the report then names kernels as TVM does)."""
    from tuner.plan import build_plan
    from tuner.plan.attribution import kernel_groups, nodes_of, ops_label

    try:
        plan = build_plan(
            prepared.path,
            target=spec,
            fusion=strategy_name,
            shapes=prepared.shapes,
            consts=prepared.consts or None,
            precision=prepared.precision,
            layout=layout,
        )
    except Exception:  # labels are a convenience: never lose a variant over them
        return {}
    groups = kernel_groups([k.kernel for k in kernels], plan)
    return {k: {"onnx_ops": ops_label(g), "onnx_nodes": nodes_of(g)} for k, g in groups.items()}


def _tune(lowered, db_dir, trials) -> None:
    from tuner.tuning import Knobs, tune
    from tuner.tuning.spaces import quiet_tvm_logs

    quiet_tvm_logs(False)
    prepared = lowered.prepared
    tune(
        lowered.mod,
        lowered.target,
        db_dir,
        Knobs(trials=trials),
        resume=True,
        model_key=f"{prepared.name}-{prepared.sha256[:8]}",
        fusion=lowered.strategy.name,
    )


def _measure(prepared, variants, spec, repeat, ort, runs_here, log) -> dict:
    """Verify every built variant against ONNX Runtime, then time them (and, with `ort`, the peers) in alternating
    blocks of back-to-back calls, and profile kernels."""
    import tvm

    from tuner.core.precision import get_precision
    from tuner.core.stats import latency_stats
    from tuner.report.reference import compare_outputs, run_onnxruntime
    from tuner.report.timing import Runnable, alternating_blocks, kernel_profile
    from tuner.runtime import make_inputs, out_of_memory

    precision = get_precision(prepared.precision)

    dev = tvm.cuda(0) if spec.is_gpu else tvm.cpu(0)
    feed = make_inputs(prepared.input_specs())
    reference = run_onnxruntime(prepared.model, feed)
    runnables = []
    for v in variants:
        if v.status != "ok":
            continue
        try:
            r = Runnable.from_build(v.name, v.build.executable, dev, [feed[i.name] for i in prepared.inputs])
            got = dict(zip([o.name for o in prepared.outputs], r.outputs()))
            v.doc["verify"] = compare_outputs(got, reference, rtol=precision.rtol, atol=precision.atol)
        except Exception as err:
            oom = out_of_memory(err, v.name, {}, dev, "running it")
            v.status, v.error = "failed", f"run failed: {oom.message if oom else str(err).strip().splitlines()[-1]}"
            continue
        if not v.doc["verify"]["ok"]:
            log(f"  {v.name}: outputs differ from ONNX Runtime (max rel err {v.doc['verify'].get('max_rel_err')})")
        runnables.append((v, r))
    runners = {v.name: r.run_once for v, r in runnables}
    if ort:
        runners.update(_peer_runners(prepared, feed))
    n_blocks = min(6, max(2, repeat // 5))
    runs = max(3, -(-repeat // n_blocks))
    log(f"  timing {', '.join(runners)}: {n_blocks} alternating blocks of {runs} back-to-back runs each")
    samples = alternating_blocks(runners, n_blocks=n_blocks, runs=runs)
    latency = {k: {**latency_stats(s), "samples_ms": [round(x, 4) for x in s]} for k, s in samples.items()}
    profiles = {v.name: kernel_profile(r, {k.kernel for k in v.static.kernels}) for v, r in runnables}
    return {"latency": latency, "profiles": profiles}


def _peer_runners(prepared, feed):
    """ONNX Runtime as shipped and without spin-waiting, OpenVINO f32 when installed, at TVM's thread count."""
    from tuner.report.reference import peer_runners

    threads = os.environ.get("TVM_NUM_THREADS")
    threads = int(threads) if threads and threads.isdigit() else None
    return peer_runners(prepared.model, feed, threads)


def _document(prepared, spec, strategies, variants, limits, measured, trials, db, repeat, wall_s, runs_here) -> dict:
    """Every number of the report, in one JSON-able document."""
    import datetime

    import tvm

    from tuner.report.timing import PEERS
    from tuner.report.verdict import verdict

    latency = measured.get("latency", {})
    profiles = measured.get("profiles", {})
    baseline = {}  # tuned flag -> the `none` variant, for what-fusion-removed figures
    for v in variants:
        if v.strategy == "none" and v.status == "ok":
            baseline[v.tuned] = v
    out = {}
    for v in variants:
        d = {"strategy": v.strategy, "tuned": v.tuned, "status": v.status, "error": v.error, **v.doc}
        if v.status == "ok":
            s = v.static
            m = s.to_json()
            launch_us = limits.launch_us
            m["launch_overhead_us"] = None if launch_us is None else launch_us * s.launches
            base = baseline.get(v.tuned)
            if base is not None:
                b = base.static
                m["vs_unfused"] = {
                    "launches_saved": b.launches - s.launches,
                    "intermediate_traffic_removed_bytes": b.intermediate_traffic_bytes - s.intermediate_traffic_bytes,
                    "intermediate_traffic_removed_pct": _pct(
                        b.intermediate_traffic_bytes - s.intermediate_traffic_bytes, b.intermediate_traffic_bytes
                    ),
                    "traffic_removed_pct": _pct(b.traffic_bytes - s.traffic_bytes, b.traffic_bytes),
                    # FuseOps never duplicates a producer, so extra FLOPs mean a pass recomputed something
                    "recomputed_flops": max(0.0, s.flops - b.flops),
                    "footprint_saved_bytes": b.planned_storage_bytes - s.planned_storage_bytes,
                }
            prof = profiles.get(v.name, {})
            kernels = []
            for k in s.kernels:
                row = k.to_json()
                p = prof.get(k.kernel)
                # a PrimFunc launched several times: split its measured total evenly over the launches
                row["time_us"] = p["total_us"] / p["calls"] if p else None
                row["gflops"] = (k.flops / (row["time_us"] * 1e3)) if p and row["time_us"] else None
                row["roofline_gflops"] = min(limits.peak_gflops, k.intensity * limits.peak_gbps)
                row.update(v.labels.get(k.kernel, {}))
                kernels.append(row)
            d["metrics"] = m
            d["kernels"] = kernels
            d["latency_ms"] = {k: val for k, val in latency.get(v.name, {}).items() if k != "samples_ms"} or None
            d["latency_samples_ms"] = latency.get(v.name, {}).get("samples_ms")
            d["kernel_time_us"] = sum(p["total_us"] for p in prof.values()) if prof else None
        out[v.name] = d
    doc = {
        "model": {
            "file": prepared.path,
            "name": prepared.name,
            "sha256": prepared.sha256,
            "inputs": {i.name: list(prepared.shapes[i.name]) for i in prepared.inputs},
        },
        "target": spec.key,
        "precision": prepared.precision,
        "tvm_version": tvm.__version__,
        "strategies": strategies,
        "tuning": {"trials_per_variant": trials} if trials else {"shared_db": db} if db else None,
        "repeat": repeat,
        "measured": runs_here,
        "machine": limits.to_json(),
        "variants": out,
        "reference": {
            peer: {k: v for k, v in latency[peer].items() if k != "samples_ms"} for peer, _ in PEERS if peer in latency
        }
        or None,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "wall_seconds": round(wall_s, 1),
    }
    doc["verdict"] = verdict(doc)
    return doc


def _pct(part, whole) -> float | None:
    return 100.0 * part / whole if whole else None
