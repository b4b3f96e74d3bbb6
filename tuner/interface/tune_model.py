"""The `tune-model` command's work: prepare, fuse, tune into the database, build tuned, verify, package."""

from __future__ import annotations

import logging
import os
import time
import warnings

from ..errors import TunerError


def quiet_tvm_logs(verbose: bool) -> None:
    level = logging.INFO if verbose else logging.WARNING
    for name in ("tvm.s_tir.meta_schedule", "tvm.meta_schedule"):
        logging.getLogger(name).setLevel(level)
    if not verbose:
        warnings.filterwarnings("ignore", module="tvm")
        warnings.filterwarnings("ignore", category=UserWarning)


def tune_model(
    model: str,
    output: str,
    target: str = "auto",
    fusion: str = "tvm",
    knobs=None,
    db: str | None = None,
    resume: bool = False,
    shapes=None,
    consts=None,
    progress=None,
    verify: bool = True,
    verbose: bool = False,
    precision: str | None = None,
) -> dict:
    import numpy as np

    from ..build import build_prepared, output_shapes_from_build, write_build
    from ..fusion import get_strategy
    from ..lowering import import_for, lower
    from ..onnx_model import prepare_model
    from ..runtime import load
    from ..runtime.package import check_writable
    from ..target import resolve_target
    from ..tuning import Knobs, tune
    from ..tuning.database import default_db_dir, open_database

    knobs = knobs or Knobs()
    if knobs.trials < 0:
        raise TunerError("--trials must be >= 0")
    quiet_tvm_logs(verbose)
    strategy = get_strategy(fusion)
    spec = resolve_target(target)
    measure_here = True
    if knobs.rpc:
        from ..tuning import check_rpc

        check_rpc(knobs.rpc)
    if spec.is_gpu:
        from ..target import detect_gpu_arch

        measure_here = bool(detect_gpu_arch())
        if not measure_here and not knobs.rpc:
            raise TunerError(
                f"tune-model --target {spec.key}: measuring CUDA kernels needs a GPU here",
                "run on a machine with an NVIDIA GPU, or measure on one over RPC: --rpc HOST:PORT:KEY",
            )
    check_writable(output)
    t0 = time.perf_counter()
    prepared = prepare_model(model, shapes, consts, precision=precision)
    db_dir = db or default_db_dir(prepared, spec)
    if os.path.isdir(db_dir):
        open_database(db_dir, spec, create=True)  # refuse another target's folder before any work
    mod, params, _ = import_for(prepared, strategy)
    fused = lower(mod, spec, strategy, params=params)
    result = tune(
        fused, spec, db_dir, knobs, resume, f"{prepared.name}-{prepared.sha256[:8]}", strategy.name, progress=progress
    )
    summary = {
        "model": model,
        "target": spec.key,
        "fusion": strategy.name,
        "precision": prepared.precision,
        "db": db_dir,
        "stopped": result.stopped,
        "trials": result.trials_this_run,
        "trials_in_db": result.trials_total,
        "tune_seconds": round(result.wall_s, 1),
        "shared_workloads": result.shared_workloads,
        "tasks": [s.to_json() for s in result.tasks],
        "repairs": result.repairs,
        "package": None,
    }
    if result.stopped == "interrupted":
        return summary
    untuned = build_prepared(prepared, spec, strategy)
    tuned = build_prepared(prepared, spec, strategy, db_dir)
    output_shapes_from_build(tuned)
    manifest = write_build(tuned, output, time.perf_counter() - t0)
    summary["package"] = output
    summary["applied"] = tuned.db_info["applied"]
    summary["kernels"] = tuned.db_info["kernels"]
    summary["default_schedules"] = tuned.db_info["untuned"]
    if not measure_here:  # tuned remotely for a GPU this machine does not have: nothing to run here
        summary["latency_ms"] = summary["verify"] = None
        summary["note"] = "kernels were measured over RPC; run and verify the package on a machine with the GPU"
        return summary
    # untuned vs tuned, measured interleaved in this process
    from ..build import export_library_bytes
    from ..runtime.package import LIBRARY, write_package

    tmp_untuned = output + ".untuned.tmp"
    write_package(
        tmp_untuned,
        {LIBRARY: export_library_bytes(untuned.executable, spec)},
        {**manifest, "tuning_db": None, "kernels": untuned.num_kernels},
    )
    try:
        m_tuned, m_untuned = load(output), load(tmp_untuned)
        feed = m_tuned.random_inputs()
        lat = {"tuned": [], "untuned": []}
        for _ in range(5):
            lat["untuned"] += m_untuned.benchmark(**feed, repeat=2, warmup=1)
            lat["tuned"] += m_tuned.benchmark(**feed, repeat=2, warmup=1)
        summary["latency_ms"] = {k: float(np.median(v)) for k, v in lat.items()}
        summary["speedup"] = summary["latency_ms"]["untuned"] / summary["latency_ms"]["tuned"]
        if verify:
            from .run import verify_against_onnx

            summary["verify"] = verify_against_onnx(m_tuned, feed, m_tuned(**feed), model)
    finally:
        os.unlink(tmp_untuned)
    return summary
