#!/usr/bin/env python3
"""Benchmark: best end-to-end latency against tuning trials, per model, with ONNX Runtime as a reference line.

    python scripts/bench_tuning.py --steps 0,16,32,64 --out reports/bench [magika minilm_l3 ...]

Each step resumes the same database up to the cumulative trial count, builds the tuned package and measures it
(median of interleaved runs, untuned and tuned side by side). Writes bench.csv and bench.png.
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def ort_latency(path, feed, threads, repeat=20):
    import numpy as np

    from tuner.report.reference import onnxruntime_session

    sess = onnxruntime_session(path, threads)
    names = [i.name for i in sess.get_inputs()]
    f = {n: feed[n] for n in names}
    for _ in range(3):
        sess.run(None, f)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        sess.run(None, f)
        times.append((time.perf_counter() - t0) * 1e3)
    return float(np.median(times))


def main(argv=None) -> int:
    from devtools.zoo import REAL_MODELS
    from tuner.commands.tune_model import tune_model
    from tuner.runtime import load
    from tuner.tuning import Knobs

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("names", nargs="*", default=["magika", "minilm_l3"])
    ap.add_argument("--steps", default="16,32,64")
    ap.add_argument("--out", default="reports/bench")
    ap.add_argument("--target", default="llvm")
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    threads = int(os.environ.setdefault("TVM_NUM_THREADS", str(os.cpu_count() or 1)))
    rows = []
    for name in args.names:
        m = REAL_MODELS[name]
        db = os.path.join(args.out, f"db-{name}")
        pkg = os.path.join(args.out, f"{name}.ftpkg")
        for trials in [int(x) for x in args.steps.split(",")]:
            t0 = time.time()
            s = tune_model(
                m.path,
                pkg,
                target=args.target,
                knobs=Knobs(trials=trials, seed=0),
                db=db,
                resume=True,
                shapes=m.shapes,
                consts=m.consts,
                verify=False,
            )
            feed = load(pkg).random_inputs()
            ort_ms = ort_latency(m.path, feed, threads)
            row = {
                "model": name,
                "trials": s["trials_in_db"],
                "untuned_ms": s["latency_ms"]["untuned"],
                "tuned_ms": s["latency_ms"]["tuned"],
                "ort_ms": ort_ms,
                "applied": s["applied"],
                "kernels": s["kernels"],
                "step_seconds": round(time.time() - t0, 1),
            }
            rows.append(row)
            print(row, flush=True)
    with open(os.path.join(args.out, "bench.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(args.names), figsize=(5 * len(args.names), 4), squeeze=False)
    for ax, name in zip(axes[0], args.names):
        r = [x for x in rows if x["model"] == name]
        ax.plot(
            [0] + [x["trials"] for x in r],
            [r[0]["untuned_ms"]] + [x["tuned_ms"] for x in r],
            "o-",
            label="fusion-tuner (tvm fusion)",
        )
        ax.axhline(sum(x["ort_ms"] for x in r) / len(r), color="gray", ls="--", label="ONNX Runtime")
        ax.set_yscale("log")
        ax.set_xlabel("trials (whole model)")
        ax.set_ylabel("latency, ms (log)")
        ax.set_title(name)
        ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(args.out, "bench.png"), dpi=90)
    print(f"wrote {args.out}/bench.csv and bench.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
