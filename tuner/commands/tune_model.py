"""The `tune-model` command's work: prepare, fuse, tune into the database, build tuned, verify, package."""

from __future__ import annotations

import os
import time

from tuner.core.errors import TunerError
from tuner.tuning.spaces import quiet_tvm_logs


def knobs_from_options(
    trials: int | None = None,
    time_budget: str | float | None = None,
    max_trials_per_task: int | None = None,
    trials_per_iter: int | None = None,
    early_stopping: int | None = None,
    cost_model: str = "xgb",
    search: str = "evolutionary",
    seed: int | None = None,
    only=(),
    skip=(),
    rpc: str | None = None,
    measure_cache: str = "warm",
    rank: str = "headroom",
    space: str = "template",
    budget_flag: str = "--time-budget",
):
    """The tuning knobs from the command's options (CLI flags and API keywords alike): 64 trials when neither a
    trial count nor a time budget is given, every trial the budget allows when only the budget is."""
    from tuner.core.units import parse_duration
    from tuner.tuning import Knobs
    from tuner.tuning.knobs import UNLIMITED

    if trials_per_iter is not None and trials_per_iter < 1:
        raise TunerError("--trials-per-iter must be >= 1")
    for name, value, choices in (
        ("--cost-model", cost_model, ("xgb", "random")),
        ("--search", search, ("evolutionary", "replay-trace")),
        ("--measure-cache", measure_cache, ("warm", "flush")),
        ("--rank", rank, ("headroom", "model", "alone")),
        ("--space", space, ("template", "tvm")),
    ):
        if value not in choices:
            raise TunerError(f"{name} {value!r}: unknown", f"choose one of: {', '.join(choices)}")
    budget_s = parse_duration(time_budget, budget_flag)
    return Knobs(
        trials=trials if trials is not None else (UNLIMITED if budget_s else 64),
        max_trials_per_task=max_trials_per_task,
        num_trials_per_iter=trials_per_iter,
        time_budget_s=budget_s,
        early_stopping=early_stopping,
        cost_model=cost_model,
        search=search,
        seed=seed,
        only=tuple(only or ()),
        skip=tuple(skip or ()),
        rpc=rpc,
        measure_cache=measure_cache,
        rank=rank,
        space=space,
    )


def tune_model(
    model: str,
    output: str,
    target: str = "auto",
    fusion: str = "tvm",
    knobs=None,
    db: str | None = None,
    resume: bool = False,
    schedules: str | None = "auto",
    shapes=None,
    consts=None,
    progress=None,
    verify: bool = True,
    verbose: bool = False,
    precision: str | None = None,
    layout: str = "auto",
    tune_shapes: list[dict] | None = None,
) -> dict:
    """Prepare and lower the model once, tune its kernels into the database (warm-started from `schedules`, see
    tuning.warm_start), build the tuned package, time it against the untuned build in memory and verify it
    against ONNX Runtime."""
    from tuner.core.target import resolve_target
    from tuner.frontend.onnx_model import prepare_model
    from tuner.fusion import get_strategy
    from tuner.runtime.package import check_writable
    from tuner.transform.layout import resolve_layout
    from tuner.tuning import Knobs
    from tuner.tuning.progress import Progress

    knobs = knobs or Knobs()
    shown = progress is not None  # ONNX Runtime is timed up front only for a display that shows it
    progress = progress or Progress()
    if knobs.trials < 0:
        raise TunerError("--trials must be >= 0")
    quiet_tvm_logs(verbose)
    strategy = get_strategy(fusion)
    spec = resolve_target(target)
    resolve_layout(layout, spec)  # refuse a bad layout before any work
    measure_here = _check_measurement(spec, knobs)
    check_writable(output)
    t0 = time.perf_counter()
    progress.stage("import", model)
    prepared = prepare_model(model, shapes, consts, precision=precision)
    db_dir, warm_from, library_note = _databases(db, schedules, prepared, spec, progress)
    if prepared.ranged:  # a package for a range of shapes: tuned at each tune shape (commands/tune_ranged.py)
        from tuner.commands.tune_ranged import tune_ranged

        opts = dict(tune_shapes=tune_shapes, consts=consts, precision=precision, layout=layout, resume=resume)
        opts.update(verify=verify, measure_here=measure_here)
        summary = tune_ranged(model, output, prepared, spec, strategy, knobs, db_dir, warm_from, opts, progress)
        return {**summary, "schedules_note": library_note}
    if tune_shapes:
        raise TunerError("--tune-shape needs a range in --input-shape", "e.g. --input-shape x:1x3x48x32..2048")
    opts = dict(resume=resume, layout=layout, verify=verify, measure_here=measure_here, shown=shown, t0=t0)
    summary = _tune_pinned(model, output, prepared, spec, strategy, knobs, db_dir, warm_from, opts, progress)
    return {**summary, "schedules_note": library_note}


def _tune_pinned(model, output, prepared, spec, strategy, knobs, db_dir, warm_from, opts, progress) -> dict:
    """tune-model of a model pinned to one shape: tune, build with the records that hold in the model, time and
    verify."""
    from tuner.build.executable import build_lowered, lower_prepared, write_build
    from tuner.commands.tuned_package import (
        clearly_slower,
        profile_default_build,
        records_checked_in_model,
        summary_of,
        time_and_verify,
    )
    from tuner.tuning import tune

    verify, measure_here, resume = opts["verify"], opts["measure_here"], opts["resume"]
    lowered = lower_prepared(prepared, spec, strategy, layout=opts["layout"])
    if opts["shown"] and verify and measure_here and not spec.is_gpu and not prepared.consts:
        _reference_stage(progress, model, prepared, spec)
    model_key = f"{prepared.name}-{prepared.sha256[:8]}"
    untuned = profile = None
    if measure_here and not spec.is_gpu and knobs.trials and knobs.rank != "alone":  # built after tuning anyway
        untuned, profile = profile_default_build(lowered, progress, spec if knobs.rank == "headroom" else None)
    result = tune(lowered.mod, spec, db_dir, knobs, resume, model_key, strategy.name, progress, warm_from, profile)
    summary = summary_of(model, spec, strategy, prepared, db_dir, result, profile)
    if result.stopped == "interrupted":
        return summary
    progress.stage("build", f"{output}, tuned records from {db_dir}")
    tuned, left_out = build_lowered(lowered, db_dir), {}
    if measure_here and not spec.is_gpu:
        tuned, untuned, left_out = records_checked_in_model(lowered, db_dir, tuned, progress, untuned)
    manifest = write_build(tuned, output, time.perf_counter() - opts["t0"])
    summary.update(
        package=output,
        layout=lowered.layout,
        applied=tuned.db_info["applied"],
        default_records=tuned.db_info.get("default_records", []),
        kernels=tuned.db_info["kernels"],
        default_schedules=tuned.db_info["untuned"],
        hand_written=tuned.db_info.get("hand_written", []),
        records_left_out={k: {"tuned_us": a, "default_us": b} for k, (a, b) in left_out.items()},
    )
    if not measure_here:  # tuned remotely for a GPU this machine does not have: nothing to run here
        summary["latency_ms"] = summary["verify"] = None
        summary["note"] = "kernels were measured over RPC; run and verify the package on a machine with the GPU"
        return summary
    progress.stage("time", "untuned vs tuned" + (" vs ONNX Runtime, then verify" if verify else ""))
    untuned = untuned or build_lowered(lowered)
    summary.update(time_and_verify(output, untuned, manifest, model if verify else None))
    if clearly_slower(summary["vs_untuned"]):  # the records together lost in the model: ship the default build
        lat = summary["latency_ms"]
        progress.stage(
            "check",
            f"tuned {lat['tuned']:.3f} ms against the default build's {lat['untuned']:.3f} ms:"
            " the package keeps the default schedules (the database keeps the records)",
        )
        manifest = write_build(untuned, output, time.perf_counter() - opts["t0"])
        summary.update(withdrawn={**lat, "words": summary["vs_untuned"]["words"], "applied": summary["applied"]})
        summary.update(applied=0, default_records=[], records_left_out={})
        summary.update(time_and_verify(output, untuned, manifest, model if verify else None))
    return summary


def _databases(db, schedules, prepared, spec, progress):
    """(database folder, warm-start source, what to say about the curated library): --db or the model's folder
    in the per-user cache, refused when it is another target's; the schedules/ library for this CPU."""
    from tuner.tuning.database.store import check_target, default_db_dir, read_manifest
    from tuner.tuning.database.warm_start import resolve_schedules

    db_dir = db or default_db_dir(prepared, spec)
    if os.path.isdir(db_dir):
        check_target(db_dir, read_manifest(db_dir), spec)  # refuse another target's folder before any work
    warm_from = resolve_schedules(schedules, spec)
    library_note = _library_note(schedules, warm_from, spec)
    if library_note:
        progress.stage("schedules", library_note)
    return db_dir, warm_from, library_note


def _reference_stage(progress, model: str, prepared, spec) -> None:
    """ONNX Runtime's latency before tuning starts: the line the live display shows tuning against."""
    import numpy as np

    from tuner.report.reference import onnxruntime_session
    from tuner.report.timing import alternating_blocks
    from tuner.runtime.inputs import make_inputs

    try:  # as shipped (spin-waiting), in a block of back-to-back calls: what a user of it gets
        sess = onnxruntime_session(model, spec.config.get("num-cores"))
        feed = make_inputs(_input_specs(prepared))
        feed = {i.name: feed[i.name] for i in sess.get_inputs()}
        samples = alternating_blocks({"ort": lambda: sess.run(None, feed)}, n_blocks=1, runs=8)["ort"]
        ms = float(np.median(samples))
    except Exception as err:  # ONNX Runtime cannot run it: verification will say so; tuning goes on
        progress.stage("reference", f"ONNX Runtime could not time the model ({type(err).__name__})")
        return
    progress.reference_ms = ms
    progress.stage("reference", f"ONNX Runtime as shipped {ms:.3f} ms (the line to beat)")


def _library_note(schedules, warm_from: str | None, spec) -> str | None:
    """What the user should know about the curated library: none for this CPU, or another CPU's of the same ISA."""
    if schedules != "auto" or spec.is_gpu:
        return None
    if warm_from is None:
        return f"no curated schedules/ library for {spec.key}: tuning starts cold"
    if os.path.basename(os.path.normpath(warm_from)) != spec.key:
        return (
            f"no curated schedules/ library for {spec.key}; starting from {os.path.basename(warm_from)}'s "
            "(same vector ISA)"
        )
    return None


def _input_specs(prepared) -> list[dict]:
    """The model's inputs as `runtime.inputs.make_inputs` takes them."""
    return prepared.input_specs()


def _check_measurement(spec, knobs) -> bool:
    """Can candidates be measured (here, or over --rpc)? Returns whether the package can run here."""
    if knobs.rpc:
        from tuner.tuning import check_rpc

        check_rpc(knobs.rpc)
    if not spec.is_gpu:
        return True
    from tuner.core.target import detect_gpu_arch

    if detect_gpu_arch():
        return True
    if not knobs.rpc:
        raise TunerError(
            f"tune-model --target {spec.key}: measuring CUDA kernels needs a GPU here",
            "run on a machine with an NVIDIA GPU, or measure on one over RPC: --rpc HOST:PORT:KEY",
        )
    return False
