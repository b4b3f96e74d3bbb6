#!/usr/bin/env python3
"""One package for a range of shapes, timed across the range (`scripts/bench.py --sweep` runs this).

    python scripts/bench_sweep.py                          # the three sweeps, untuned packages
    python scripts/bench_sweep.py --budget 4m text_recognizer
    python scripts/bench_sweep.py --points 3 batch_cnn     # a smoke run

Per sweep: one ranged package (`compile`, or `tune-model --time-budget B` with --budget, tuned at the sweep's
tune shapes), and at each point of the sweep a package pinned to that shape (`compile --input-shape` of it,
with the same tuning database: tuned records where the shape is a tune shape, default schedules elsewhere),
ONNX Runtime as shipped (spin-waiting) and OpenVINO f32 when installed. At each point the four run in
alternating blocks with the same inputs and threads, and the ranged package's outputs are checked against
ONNX Runtime's. Writes sweep.csv and sweep.png to --out. Real models: `python scripts/fetch_models.py`; run this
while nothing else runs.
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
import time
from dataclasses import dataclass

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


@dataclass(frozen=True)
class Sweep:
    model: str  # a zoo name
    shape: str  # --input-shape with the range
    tune: tuple[str, ...]  # --tune-shape values
    axis: tuple[str, int]  # the input and dimension that vary (the plot's x)
    points: tuple[int, ...]


SWEEPS = {
    "text_recognizer": Sweep(
        "ppocr_rec",
        "x:1x3x48x32..2048",
        ("x:1x3x48x320", "x:1x3x48x1280"),
        ("x", 3),
        (32, 100, 200, 320, 480, 640, 960, 1280, 1600, 2048),
    ),
    "sentence_encoder": Sweep(
        "minilm_l3",
        "input_ids:1x8..512 attention_mask:1x8..512",
        ("input_ids:1x128", "input_ids:1x512"),
        ("input_ids", 1),
        (8, 16, 32, 64, 100, 128, 200, 256, 384, 512),
    ),
    "batch_cnn": Sweep(
        "ppocr_cls",
        "x:1..16x3x48x192",
        ("x:8x3x48x192", "x:16x3x48x192"),
        ("x", 0),
        (1, 2, 3, 4, 6, 8, 10, 12, 14, 16),
    ),
}


def build(sweep: Sweep, out_dir: str, budget: str | None, threads: int) -> tuple[str, str | None, float]:
    """(ranged package, tuning database or None, seconds)."""
    from devtools.zoo import REAL_MODELS
    from tuner.cli.shapes import parse_input_shapes

    path = REAL_MODELS[sweep.model].path
    shapes = parse_input_shapes([sweep.shape])
    tune_shapes = [parse_input_shapes([t], flag="--tune-shape") for t in sweep.tune]
    pkg = os.path.join(out_dir, f"{sweep.model}.ranged.ftpkg")
    t0 = time.perf_counter()
    if budget:
        from tuner.commands.tune_model import knobs_from_options, tune_model

        db = os.path.join(out_dir, f"{sweep.model}.db")
        knobs = knobs_from_options(time_budget=budget)
        tune_model(path, pkg, target="llvm", knobs=knobs, db=db, shapes=shapes, tune_shapes=tune_shapes, verify=False)
        return pkg, db, time.perf_counter() - t0
    from tuner.commands.compile import compile_model

    compile_model(path, pkg, target="llvm", db="none", shapes=shapes, tune_shapes=tune_shapes)
    return pkg, None, time.perf_counter() - t0


def point(sweep: Sweep, ranged: str, db: str | None, size: int, out_dir: str, threads: int, blocks: int, runs: int):
    """One row: the ranged package, the pinned one, ONNX Runtime and OpenVINO at one size."""
    import numpy as np

    from devtools.zoo import REAL_MODELS
    from tuner.commands.compile import compile_model
    from tuner.report.reference import compare_outputs, onnxruntime_session, openvino_runner
    from tuner.report.timing import alternating_blocks
    from tuner.runtime import load

    model = load(ranged)
    name, axis = sweep.axis
    pinned_shapes = {}
    for spec in model.inputs:
        lo_hi = spec.get("shape_range") or [[d, d] for d in spec["shape"]]
        ties = spec.get("dim_names") or [None] * len(lo_hi)
        tied = next((n for n in model.inputs if n["name"] == name), None)["dim_names"][axis]
        pinned_shapes[spec["name"]] = tuple(
            size if (spec["name"] == name and k == axis) or (t is not None and t == tied) else lo
            for k, ((lo, _), t) in enumerate(zip(lo_hi, ties))
        )
    from tuner.runtime.inputs import make_inputs

    feed = make_inputs([{**s, "shape": list(pinned_shapes[s["name"]])} for s in model.inputs], seed=size)
    path = REAL_MODELS[sweep.model].path
    pinned = os.path.join(out_dir, f"{sweep.model}.{size}.ftpkg")
    compile_model(path, pinned, target="llvm", db=db or "none", shapes=pinned_shapes)
    pinned_model = load(pinned)
    sess = onnxruntime_session(path, threads, True)
    runners = {
        "ranged": lambda: model(**feed),
        "pinned": lambda: pinned_model(**feed),
        "ort": lambda: sess.run(None, feed),
    }
    ov = openvino_runner(path, feed, threads, "f32")
    if ov is not None:
        runners["ov"] = ov
    lat = {k: float(np.median(v)) for k, v in alternating_blocks(runners, blocks, runs).items()}
    check = compare_outputs(model(**feed), dict(zip(model.output_names, sess.run(None, feed))), rtol=1e-3, atol=1e-4)
    tuned = any(v["shapes"] == {k: list(d) for k, d in pinned_shapes.items()} for v in model.manifest["variants"])
    row = {"sweep": "", "size": size, "tune_shape": tuned, "ok": check["ok"], "max_abs_err": check["max_abs_err"]}
    row.update({f"{k}_ms": round(v, 3) for k, v in lat.items()})
    row["ranged_vs_pinned"] = round(lat["ranged"] / lat["pinned"], 3)
    row["ranged_vs_ort"] = round(lat["ranged"] / lat["ort"], 3)
    if "ov" in lat:
        row["ranged_vs_ov"] = round(lat["ranged"] / lat["ov"], 3)
    os.remove(pinned)
    return row


def plot(rows: list[dict], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sweeps = list(dict.fromkeys(r["sweep"] for r in rows))
    fig, axes = plt.subplots(1, len(sweeps), figsize=(5.2 * len(sweeps), 4.2), squeeze=False)
    for ax, name in zip(axes[0], sweeps):
        rs = [r for r in rows if r["sweep"] == name]
        x = [r["size"] for r in rs]
        for key, label, style in (
            ("ranged_ms", "ours: one package for the range", "o-"),
            ("pinned_ms", "ours: a package pinned to each shape", "s--"),
            ("ort_ms", "ONNX Runtime", "^-"),
            ("ov_ms", "OpenVINO f32", "v-"),
        ):
            if all(key in r for r in rs):
                ax.plot(x, [r[key] for r in rs], style, label=label, markersize=4)
        for r in rs:
            if r["tune_shape"]:
                ax.axvline(r["size"], color="grey", lw=0.6, ls=":")
        sweep = SWEEPS[name]
        ax.set_title(f"{name} ({sweep.model}): {sweep.shape.split()[0]}", fontsize=9)
        ax.set_xlabel(f"{sweep.axis[0]} dimension {sweep.axis[1]} (dotted: tune shapes)")
        ax.set_ylabel("ms per call (median)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sweeps", nargs="*", default=list(SWEEPS), help=f"of: {', '.join(SWEEPS)}")
    ap.add_argument("--budget", help="tune the ranged package for this long (e.g. 4m); default: untuned")
    ap.add_argument("--points", type=int, help="only the first N points of each sweep, and the last (a smoke run)")
    ap.add_argument("--blocks", type=int, default=6)
    ap.add_argument("--runs", type=int, default=6)
    ap.add_argument("--out", default="reports/sweep")
    args = ap.parse_args(argv)
    unknown = [s for s in args.sweeps if s not in SWEEPS]
    if unknown:
        ap.error(f"unknown sweep(s) {', '.join(unknown)}; known: {', '.join(SWEEPS)}")
    threads = int(os.environ.setdefault("TVM_NUM_THREADS", str(os.cpu_count() or 1)))
    os.makedirs(args.out, exist_ok=True)
    rows = []
    for name in args.sweeps:
        sweep = SWEEPS[name]
        ranged, db, seconds = build(sweep, args.out, args.budget, threads)
        print(f"{name}: built {ranged} in {seconds:.0f} s", flush=True)
        sizes = sweep.points if not args.points else (*sweep.points[: args.points], sweep.points[-1])
        for size in dict.fromkeys(sizes):
            row = point(sweep, ranged, db, size, args.out, threads, args.blocks, args.runs)
            row["sweep"] = name
            rows.append(row)
            print("  " + ", ".join(f"{k}={v}" for k, v in row.items() if k != "sweep"), flush=True)
    with open(os.path.join(args.out, "sweep.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(dict.fromkeys(k for r in rows for k in r)))
        w.writeheader()
        w.writerows(rows)
    plot(rows, os.path.join(args.out, "sweep.png"))
    print(f"wrote {args.out}/sweep.csv and sweep.png")
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
