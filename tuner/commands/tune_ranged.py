"""`tune-model` for a range of shapes: tune the kernels at each tune shape, then build one package for the range.

for each tune shape (default: the middle and the top of the ranges), with an equal share of the budget:
    prepare and lower the model pinned to it -> tune its kernels into the one database
build: the generic build over symbolic dimensions + a build per tune shape from the database, each tuned
       record checked in the model as for a pinned package (tuner/build/ranged.py)
time at the first tune shape (as a pinned package is timed); verify at the tune shapes and at the ends of
the ranges against ONNX Runtime
"""

from __future__ import annotations

import dataclasses
import logging
import time


def tune_ranged(model, output, prepared, spec, strategy, knobs, db_dir, warm_from, opts, progress) -> dict:
    """`opts`: tune_shapes, consts, precision, layout, resume, verify, measure_here (tune_model's own options)."""
    from tuner.build.executable import lower_prepared
    from tuner.build.ranged import prepare_pinned, tune_shapes_for
    from tuner.commands.tuned_package import profile_default_build
    from tuner.core.shapes import format_dims
    from tuner.tuning import tune

    t0 = time.perf_counter()
    ms_logger = logging.getLogger("tvm.s_tir.meta_schedule")
    console_level = ms_logger.level  # quiet_tvm_logs's: each tuning run leaves it at DEBUG for the next
    shapes = tune_shapes_for(prepared, opts["tune_shapes"])
    share = _budget_share(knobs, len(shapes))
    lowered, results, untuned = {}, [], {}  # untuned: the default builds the profiles made, reused after tuning
    for k, pinned in enumerate(shapes):
        label = " ".join(f"{n}:{format_dims(d)}" for n, d in pinned.items())
        progress.stage("tune shape", f"{k + 1} of {len(shapes)}: {label}")
        p = prepare_pinned(model, pinned, opts["consts"], opts["precision"])
        low = lower_prepared(p, spec, strategy, layout=opts["layout"])
        lowered[_key(pinned)] = low
        ms_logger.setLevel(console_level)
        key = f"{prepared.name}-{prepared.sha256[:8]}-{'-'.join(format_dims(d) for d in pinned.values())}"
        profile = None
        if opts["measure_here"] and not spec.is_gpu and share.trials and share.rank != "alone":
            peak_of = spec if share.rank == "headroom" else None
            untuned[_key(pinned)], profile = profile_default_build(low, progress, peak_of)
        args = (opts["resume"], key, strategy.name, progress, warm_from, profile)
        results.append(tune(low.mod, spec, db_dir, share, *args))
        if results[-1].stopped == "interrupted":
            return _summary(model, spec, strategy, prepared, db_dir, results, shapes)
    summary = _summary(model, spec, strategy, prepared, db_dir, results, shapes)
    progress.stage("build", f"{output}: the range and {len(shapes)} tune shape(s), tuned records from {db_dir}")
    opts = {**opts, "untuned": untuned}
    build, manifest = _build(model, prepared, spec, strategy, db_dir, shapes, lowered, opts, progress, t0, output)
    first = build.variants[0][1] if build.variants else build.generic
    summary.update(
        package=output,
        layout=first.layout,
        applied=first.db_info["applied"] if first.db_info else 0,
        kernels=build.generic.num_kernels,
        default_schedules=first.db_info["untuned"] if first.db_info else [],
        records_left_out={},
        tune_shapes=[{n: list(d) for n, d in s.items()} for s in shapes],
    )
    if not opts["measure_here"]:
        summary["latency_ms"] = summary["verify"] = None
        return summary
    from tuner.build.executable import build_lowered
    from tuner.commands.tuned_package import time_and_verify

    progress.stage("time", "untuned vs tuned at the first tune shape; verify across the range")
    default_build = untuned.get(_key(shapes[0])) or build_lowered(lowered[_key(shapes[0])])
    summary.update(time_and_verify(output, default_build, manifest, model if opts["verify"] else None))
    if opts["verify"]:
        summary["verify_shapes"] = verify_across_range(output, model)
    return summary


def _build(model, prepared, spec, strategy, db_dir, shapes, lowered, opts, progress, t0, output):
    from tuner.build.executable import build_lowered
    from tuner.build.ranged import build_ranged, write_ranged

    def variant(p):  # the build tune-model makes of a pinned model: records slower in the model left out
        from tuner.commands.tuned_package import records_checked_in_model

        low, default = lowered[_key(p.shapes)], opts["untuned"].get(_key(p.shapes))
        tuned = build_lowered(low, db_dir)
        return records_checked_in_model(low, db_dir, tuned, progress, default)[0] if opts["measure_here"] else tuned

    args = (opts["layout"], opts["consts"], opts["precision"], variant)
    build = build_ranged(model, prepared, spec, strategy, db_dir, shapes, *args)
    return build, write_ranged(build, output, time.perf_counter() - t0)


def verify_across_range(package: str, onnx_path: str) -> list[dict]:
    """The package against ONNX Runtime at the bottom and the top of its ranges and at a size between that is no
    tune shape: [{"shapes", "ok", ...compare_outputs}]."""
    from tuner.commands.run import verify_against_onnx
    from tuner.runtime import load
    from tuner.runtime.inputs import make_inputs

    m = load(package)
    tuned = {_key({k: tuple(v) for k, v in var["shapes"].items()}) for var in m.manifest.get("variants") or []}
    out = []
    for pick in (lambda lo, hi: lo, lambda lo, hi: lo + (hi - lo) // 3 + 1, lambda lo, hi: hi):
        specs = [_at(spec, pick) for spec in m.inputs]
        feed = make_inputs(specs, seed=3)
        shapes = {s["name"]: s["shape"] for s in specs}
        if any(o["shapes"] == shapes for o in out):
            continue
        check = verify_against_onnx(m, feed, m(**feed), onnx_path)
        out.append({"shapes": shapes, "tune_shape": _key(shapes) in tuned, **check})
    return out


def _at(spec: dict, pick) -> dict:
    ranges = spec.get("shape_range") or [[d, d] for d in spec["shape"]]
    return {**spec, "shape": [pick(lo, hi) if lo < hi else lo for lo, hi in ranges]}


def _key(shapes: dict) -> tuple:
    return tuple(sorted((n, tuple(d)) for n, d in shapes.items()))


def _budget_share(knobs, n: int):
    """Each tune shape's equal share of the trials and of the time budget."""
    from tuner.tuning.knobs import UNLIMITED

    trials = knobs.trials if knobs.trials >= UNLIMITED else max(1, knobs.trials // n)
    budget = knobs.time_budget_s / n if knobs.time_budget_s else knobs.time_budget_s
    return dataclasses.replace(knobs, trials=trials, time_budget_s=budget)


def _summary(model, spec, strategy, prepared, db_dir, results, shapes) -> dict:
    from tuner.commands.tuned_package import summary_of

    summary = summary_of(model, spec, strategy, prepared, db_dir, results[-1])
    summary.update(
        trials=sum(r.trials_this_run for r in results),
        tune_seconds=round(sum(r.wall_s for r in results), 1),
        tasks=[t.to_json() for r in results for t in r.tasks],
        stopped=results[-1].stopped,
        tune_shapes=[{n: list(d) for n, d in s.items()} for s in shapes],
    )
    return summary
