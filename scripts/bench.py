#!/usr/bin/env python3
"""Tuned vs ONNX Runtime: the benchmark of the README's headline table.

    python scripts/bench.py                      # every model, 10 minutes of tuning each (cold: empty database)
    python scripts/bench.py --quick magika       # 1 minute each, a smoke run
    python scripts/bench.py --budget 3m --unfused none magika minilm_l3

Per model, in one process and one thread count: ONNX Runtime (all graph optimisations; with its default
spin-waiting, as a user runs it alone, and without), OpenVINO's CPU plugin when installed (f32, our precision,
and as shipped), the fused package untuned (every kernel on its cheap default
schedule), tuned cold (`tune-model --time-budget B` into an empty database), tuned warm (from `schedules/` when
it has records for this target), and, for the models named by --unfused, the unfused model tuned with the same
budget. Every runner is timed in alternating blocks of back-to-back runs (`time_packages`), packages called as
users call them (numpy in and out, as ONNX Runtime's run). Ratios are to spinning ONNX Runtime first (the
headline), then to ONNX Runtime without spinning; geometric means; writes bench.csv and bench.png to --out.
Real models come from `python scripts/fetch_models.py`; run this while nothing else runs.

    python scripts/bench.py --sweep [SWEEP ...]  # ranged packages across their range (scripts/bench_sweep.py)
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

DEFAULT_MODELS = ["ppocr_det", "minilm_l3", "yolov8n", "magika", "light_resnet50", "transformer"]
DEFAULT_UNFUSED = ["light_resnet50", "transformer"]


def resolve(name: str):
    """(path, shapes, consts) of a zoo model, a light_* model, a synthetic model, or an .onnx path."""
    from devtools.zoo import MODELS_DIR, REAL_MODELS, light_models

    if name in REAL_MODELS:
        m = REAL_MODELS[name]
        return m.path, m.shapes, m.consts
    for path in light_models():
        if os.path.basename(path) == f"{name}.onnx":
            return path, {}, {}
    path = name if name.endswith(".onnx") else os.path.join(MODELS_DIR, f"{name}.onnx")
    if not os.path.exists(path):
        raise SystemExit(f"bench: no model {name!r} (run scripts/fetch_models.py and scripts/make_models.py)")
    return path, {}, {}


def ort_session(prepared, threads: int, spinning: bool = True):
    """ONNX Runtime as users run it: all graph optimisations, `threads` intra-op threads, spin-waiting on."""
    from tuner.report.reference import onnxruntime_session

    return onnxruntime_session(prepared.model, threads, spinning)


PACKAGES = ("untuned", "tuned", "unfused_tuned", "warm")


def blocks(runners: dict, n_blocks: int, runs: int) -> dict:
    """Median ms of each runner over `n_blocks` alternating blocks of `runs` back-to-back runs, the first run of
    each block dropped (it pays the switch from the previous runner: idle or spinning workers, cold caches). The
    order rotates from block to block (`tuner.core.stats.rotated`)."""
    import numpy as np

    from tuner.report.timing import alternating_blocks

    return {k: float(np.median(v)) for k, v in alternating_blocks(runners, n_blocks, runs).items()}


def time_packages(prepared, paths: dict, threads: int, n_blocks: int = 8, runs: int = 10) -> dict:
    """Each package against ONNX Runtime with its default spin-waiting (as a user runs it alone) and without it:
    {ort_ms, ort_spin_ms, <pkg>_ms, <pkg>_vs_ort, <pkg>_vs_ort_spin, fusion_speedup_tuned}. Packages are called
    as users call them (numpy in, numpy out), as ORT's run is."""

    from tuner.report.reference import onnxruntime_session, openvino_runner
    from tuner.runtime import load

    pkgs = {k: load(p) for k, p in paths.items()}
    feed = pkgs["untuned"].random_inputs()
    blob = prepared.model.SerializeToString()
    runners = {}
    for label, spin in (("ort", False), ("ort_spin", True)):
        sess = onnxruntime_session(blob, threads, spin)
        ort_feed = {i.name: feed[i.name] for i in sess.get_inputs()}
        runners[label] = lambda s=sess, f=ort_feed: s.run(None, f)
    for label, precision in (("ov", "f32"), ("ov_default", None)):  # when OpenVINO is installed
        run = openvino_runner(blob, feed, threads, precision)
        if run is not None:
            runners[label] = run
    for k, m in pkgs.items():
        runners[k] = lambda m=m: m(**feed)
    med = blocks(runners, n_blocks, runs)
    row = {f"{k}_ms": round(med[k], 3) for k in ("ort", "ort_spin", "ov", "ov_default") if k in med}
    best = min(med["ort_spin"], med.get("ov", math.inf))  # the faster peer at our precision
    for k in pkgs:
        row[f"{k}_ms"] = round(med[k], 3)
        row[f"{k}_vs_ort"] = round(med[k] / med["ort"], 3)
        row[f"{k}_vs_ort_spin"] = round(med[k] / med["ort_spin"], 3)
        if "ov" in med:
            row[f"{k}_vs_ov"] = round(med[k] / med["ov"], 3)
        row[f"{k}_vs_best"] = round(med[k] / best, 3)
    if "unfused_tuned" in pkgs:
        row["fusion_speedup_tuned"] = round(med["unfused_tuned"] / med["tuned"], 3)
    return row


def bench_model(name, args, threads) -> dict:
    from tuner.commands.compile import compile_model
    from tuner.commands.tune_model import tune_model
    from tuner.frontend.onnx_model import prepare_model
    from tuner.tuning import Knobs

    path, shapes, consts = resolve(name)
    out = os.path.join(args.out, os.path.splitext(os.path.basename(name))[0])  # (a path names its file's stem)
    os.makedirs(out, exist_ok=True)
    prepared = prepare_model(path, shapes or None, consts or None)
    row = {"model": name, "budget_s": args.budget_s}
    pkgs = {}
    compile_model(
        path, f"{out}/untuned.ftpkg", target=args.target, fusion="tvm", shapes=shapes, consts=consts, db="none"
    )
    pkgs["untuned"] = f"{out}/untuned.ftpkg"
    variants = [("tuned", "tvm")] if "tuned" in args.variants else []
    variants += [("unfused_tuned", "none")] if name in args.unfused and "unfused" in args.variants else []
    for label, fusion in variants:
        db = os.path.join(out, f"db-{fusion}-{int(time.time())}")  # cold: a new, empty database
        t0 = time.time()
        s = tune_model(
            path,
            f"{out}/{label}.ftpkg",
            target=args.target,
            fusion=fusion,
            db=db,
            shapes=shapes,
            consts=consts,
            verify=True,
            knobs=Knobs(trials=10**9, time_budget_s=args.budget_s, seed=0),
            schedules="none",
        )
        row[f"{label}_wall_s"] = round(time.time() - t0, 1)  # import, tune, build, verify
        row[f"{label}_search_s"] = s.get("tune_seconds")  # the tuning loop alone: what the budget bounds
        row[f"{label}_trials"] = s["trials"]
        row[f"{label}_verify"] = bool(s.get("verify", {}).get("ok"))
        row[f"{label}_left_out"] = len(s.get("records_left_out") or {})  # records slower in the model than default
        pkgs[label] = f"{out}/{label}.ftpkg"
    if "warm" in args.variants:  # a new database that starts from the curated schedules/ of this target
        t0 = time.time()
        s = tune_model(
            path,
            f"{out}/warm.ftpkg",
            target=args.target,
            fusion="tvm",
            db=os.path.join(out, f"db-warm-{int(time.time())}"),
            shapes=shapes,
            consts=consts,
            verify=True,
            knobs=Knobs(trials=10**9, time_budget_s=args.warm_budget_s, seed=0),
            schedules="auto",
        )
        row["warm_wall_s"] = round(time.time() - t0, 1)
        row["warm_search_s"] = s.get("tune_seconds")
        row["warm_trials"] = s["trials"]
        row["warm_reused"] = (s.get("warm_start") or {}).get("workloads", 0)
        row["warm_verify"] = bool(s.get("verify", {}).get("ok"))
        pkgs["warm"] = f"{out}/warm.ftpkg"
    row.update(time_packages(prepared, pkgs, threads, args.blocks, args.runs))
    return row


def geomean(values) -> float | None:
    values = [v for v in values if v]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def plot(rows, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = [k for k in ("untuned", "tuned", "warm", "unfused_tuned") if any(f"{k}_vs_ort" in r for r in rows)]
    fig, ax = plt.subplots(figsize=(1.6 * len(rows) + 3, 4))
    width = 0.8 / len(keys)
    for i, k in enumerate(keys):
        xs = [j + i * width for j in range(len(rows))]
        ax.bar(xs, [r.get(f"{k}_vs_ort_spin", 0) for r in rows], width, label=k.replace("_", " "))
    ax.axhline(1.0, color="black", lw=1, ls="--", label="ONNX Runtime (default settings)")
    ax.set_yscale("log")
    ax.set_xticks([j + width * (len(keys) - 1) / 2 for j in range(len(rows))], [r["model"] for r in rows])
    ax.set_ylabel("latency / ONNX Runtime (lower is better)")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))  # outside: never over a bar
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--sweep"]:  # one package for a range of shapes, across the range: scripts/bench_sweep.py
        import bench_sweep

        return bench_sweep.main(argv[1:])
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="*", default=DEFAULT_MODELS)
    ap.add_argument("--budget", default="10m", help="tuning time per model and variant (90s, 10m)")
    ap.add_argument("--quick", action="store_true", help="1 minute per model: a smoke run")
    ap.add_argument(
        "--unfused",
        default=",".join(DEFAULT_UNFUSED),
        help="models also tuned unfused with the same budget (comma-separated, or none)",
    )
    ap.add_argument("--blocks", type=int, default=8, help="alternating timing blocks per runner")
    ap.add_argument("--runs", type=int, default=10, help="timed back-to-back runs per block")
    ap.add_argument(
        "--variants",
        default="tuned,warm,unfused",
        help="which tuned variants to run besides ONNX Runtime and untuned (comma-separated: tuned, warm, unfused)",
    )
    ap.add_argument(
        "--warm-budget",
        default="60s",
        help="tuning time of the warm variant (from schedules/); 60 s keeps the whole tune-model under 2 minutes",
    )
    ap.add_argument("--target", default="llvm")
    ap.add_argument("--out", default="reports/bench")
    ap.add_argument("--row-json", help=argparse.SUPPRESS)  # one model's row, written by its own process
    args = ap.parse_args(argv)
    from tuner.core.target import resolve_target
    from tuner.core.units import parse_duration

    args.budget_s = 60.0 if args.quick else parse_duration(args.budget)
    args.unfused = [] if args.unfused == "none" else args.unfused.split(",")
    args.variants = set(args.variants.split(","))
    args.warm_budget_s = parse_duration(args.warm_budget)
    spec = resolve_target(args.target)
    args.target_key = spec.key
    threads = int(os.environ.setdefault("TVM_NUM_THREADS", str(spec.config.get("num-cores") or os.cpu_count())))
    os.makedirs(args.out, exist_ok=True)
    if args.row_json:  # one model, in the fresh process the loop below started
        try:
            row = bench_model(args.models[0], args, threads)
        except Exception as e:  # one model's failure is a row, not the end of a 90-minute run
            row = {"model": args.models[0], "error": f"{type(e).__name__}: {e}"[:300]}
        with open(args.row_json, "w") as f:
            json.dump(row, f)
        return 0
    rows = []
    for name in args.models:
        rows.append(bench_in_fresh_process(name, argv if argv is not None else sys.argv[1:], args))
        print(rows[-1], flush=True)
        write_csv(rows, os.path.join(args.out, "bench.csv"))  # after every model: a killed run keeps its rows
    ok = [r for r in rows if "error" not in r]
    if ok:
        plot(ok, os.path.join(args.out, "bench.png"))
    print(f"\n{spec.key}, {threads} threads, budget {args.budget_s:.0f} s per model (cold)")
    print_table(rows)
    return 0


def bench_in_fresh_process(name: str, argv: list[str], args) -> dict:
    """One model's row from a process of its own: one model's peers (OpenVINO's and ONNX Runtime's thread pools)
    must not share the process with the next model's timing. Seven models in one process timed the later models'
    untuned packages slower than their own processes did (MiniLM 15.6 against 9.0 ms, magika 7.7 against 3.8,
    ResNet-50 75 against 40, YOLOv8n 17.6 against 16.0) while the peers moved less; the cause was not pinned
    down."""
    import subprocess
    import tempfile

    flags = [a for a in argv if a not in args.models]
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "row.json")
        r = subprocess.run([sys.executable, os.path.abspath(__file__), name, *flags, "--row-json", out])
        if r.returncode != 0 or not os.path.exists(out):
            return {"model": name, "error": f"the model's process exited with {r.returncode}"}
        with open(out) as f:
            return json.load(f)


def print_table(rows) -> None:
    """Each package's ratio to spinning ONNX Runtime / to ONNX Runtime without spinning, and the geometric means."""
    ok = [r for r in rows if "error" not in r]
    keys = [k for k in PACKAGES if any(f"{k}_vs_ort" in r for r in ok)]
    print(f"{'model':16} {'ORT ms':>8} {'no spin':>8} " + " ".join(f"{k + ' ×ORT':>22}" for k in keys))
    for r in rows:
        if "error" in r:
            print(f"{r['model']:16} failed: {r['error']}")
            continue
        cells = " ".join(
            f"{r[k + '_vs_ort_spin']:13.2f} / {r[k + '_vs_ort']:5.2f}" if k + "_ms" in r else " " * 22 for k in keys
        )
        print(f"{r['model']:16} {r['ort_spin_ms']:8.3f} {r['ort_ms']:8.3f} {cells}", flush=True)
        if "ov_ms" in r:
            print(
                f"{'':16} OpenVINO f32 {r['ov_ms']:.3f} ms (as shipped {r.get('ov_default_ms', float('nan')):.3f}): "
                + ", ".join(f"{k} ×OV {r[k + '_vs_ov']:.2f}" for k in keys if k + "_vs_ov" in r)
            )
        if "fusion_speedup_tuned" in r:
            print(f"{'':16} fused vs unfused, both tuned: {r['fusion_speedup_tuned']:.2f}×")
    for k in keys:
        spin, plain = (geomean([r.get(f"{k}_vs_ort{x}") for r in ok]) for x in ("_spin", ""))
        ov, best = (geomean([r.get(f"{k}_vs_{x}") for r in ok]) for x in ("ov", "best"))
        more = f"; ×OpenVINO f32 {ov:.2f}; ×the faster peer {best:.2f}" if ov else ""
        print(f"geometric mean {k}: ×ORT {spin:.2f} (×ORT without spinning {plain:.2f}){more}")


def write_csv(rows, path):
    fields = sorted({k for r in rows for k in r}, key=lambda k: (k != "model", k))
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)


if __name__ == "__main__":
    sys.exit(main())
