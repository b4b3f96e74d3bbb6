"""What tune-model does with a tuned build, pinned or ranged: its records checked in the model, its summary,
and its timing against the untuned build and the peers, then its verification."""

from __future__ import annotations


def profile_default_build(lowered, progress, peak_of=None):
    """(the default build, its in-model profile): where the model's time goes before tuning, with its own
    constants (tuning/model_profile.py), so the budget goes where the latency is. With `peak_of` (a CPU target
    spec) the profile carries the CPU's compute peak, so the budget goes where latency is above the floor."""
    from tuner.build.executable import build_lowered
    from tuner.runtime.inputs import make_inputs
    from tuner.tuning.model_profile import profile_model

    progress.stage("profile", "the default build, kernel by kernel in the model")
    untuned = build_lowered(lowered)
    feed = list(make_inputs(lowered.prepared.input_specs()).values())
    profile = profile_model(lowered.mod, untuned.executable, feed)
    if peak_of is not None:
        from tuner.report.peak import cpu_peak

        profile.peak_gflops, profile.peak_how = cpu_peak(peak_of, int(peak_of.config.get("num-cores", 1)))
    progress.stage("profile", profile.words())
    return untuned, profile


def records_checked_in_model(lowered, db_dir, tuned, progress, untuned=None):
    """(the tuned build less the records whose kernels ran slower in the model than their default schedule, the
    default build (`untuned`, built here when not given), {kernel: (µs with the record, µs without)}); see
    build/in_model.py."""
    from tuner.build.executable import build_lowered
    from tuner.build.in_model import slower_in_model
    from tuner.runtime.inputs import make_inputs

    untuned = untuned or build_lowered(lowered)
    slower = slower_in_model(tuned, untuned, list(make_inputs(lowered.prepared.input_specs()).values()))
    if slower:
        progress.stage("check", f"{len(slower)} tuned kernel(s) ran slower in the model than by default: left out")
        tuned = build_lowered(lowered, db_dir, drop_records=set(slower))
    return tuned, untuned, slower


def clearly_slower(vs_untuned: dict) -> bool:
    """Did the tuned package run slower than the default build beyond the noise: a higher median and p10-p90
    ranges apart? The in-model check judges each record alone against a 3% margin; small losses it lets through
    can add up (the recognizer's 5-minute tune: no record left out, the package 5% slower in one run)."""
    return vs_untuned["ratio"] > 1.0 and not vs_untuned["overlap"]


def summary_of(model, spec, strategy, prepared, db_dir, result, profile=None) -> dict:
    return {
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
        "warm_start": result.warm.to_json() if result.warm else None,
        "tasks": [s.to_json() for s in result.tasks],
        "in_model_profile": profile.to_json(result.tasks) if profile is not None else None,
        "repairs": result.repairs,
        "package": None,
    }


def time_and_verify(package: str, untuned, manifest: dict, onnx_path: str | None) -> dict:
    """Untuned (in memory) and tuned (the written package, loaded as a user would) against the peers a user
    would pick instead, each called as users call it, in alternating blocks in this process
    (report.timing.alternating_blocks); then the tuned outputs against ONNX Runtime."""
    import numpy as np

    from tuner.core.stats import compare_latency
    from tuner.report.reference import peer_runners
    from tuner.report.timing import alternating_blocks, timing_method, versus_peers
    from tuner.runtime import Model, load

    m_tuned = load(package)
    m_untuned = Model.from_executable(untuned.executable, {**manifest, "tuning_db": None}, "untuned build")
    feed = m_tuned.random_inputs()
    failures = {}
    runners = {"untuned": lambda: m_untuned(**feed), "tuned": lambda: m_tuned(**feed)}
    if onnx_path and manifest["target"]["kind"] == "llvm" and not manifest.get("consts"):
        runners.update(peer_runners(onnx_path, feed, manifest.get("num_threads"), failures))
    lat = alternating_blocks(runners)
    out = {"latency_ms": {k: float(np.median(v)) for k, v in lat.items()}}
    out["speedup"] = out["latency_ms"]["untuned"] / out["latency_ms"]["tuned"]
    out["vs_untuned"] = compare_latency(lat["tuned"], lat["untuned"])
    out.update(versus_peers(lat, "tuned"))
    out["timing"] = timing_method(lat, failures)
    if onnx_path:
        from tuner.commands.run import verify_against_onnx

        out["verify"] = verify_against_onnx(m_tuned, feed, m_tuned(**feed), onnx_path)
    return out
