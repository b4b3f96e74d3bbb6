#!/usr/bin/env python3
"""Re-time the packages a scripts/bench.py run left (untuned, tuned, unfused, warm) without tuning again.

    python scripts/retime.py /tmp/bench [models...] [--blocks 8] [--runs 10]

The timing is bench.py's own (`time_packages`): alternating blocks of back-to-back runs, ONNX Runtime with and
without spin-waiting. Used when the timing method changed after a long run, or to check a run's figures again.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def main(argv=None) -> int:
    from scripts.bench import PACKAGES, plot, print_table, resolve, time_packages, write_csv
    from tuner.frontend.onnx_model import prepare_model

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("bench_dir")
    ap.add_argument("models", nargs="*")
    ap.add_argument("--blocks", type=int, default=8)
    ap.add_argument("--runs", type=int, default=10, help="timed runs per block")
    ap.add_argument("--out", help="write bench.csv and bench.png here as bench.py does")
    args = ap.parse_args(argv)
    threads = int(os.environ.setdefault("TVM_NUM_THREADS", str(os.cpu_count() or 1)))
    names = args.models or sorted(
        d for d in os.listdir(args.bench_dir) if os.path.exists(os.path.join(args.bench_dir, d, "untuned.ftpkg"))
    )
    print(f"{threads} threads; medians of {args.blocks} alternating blocks of {args.runs} back-to-back runs")
    rows = []
    for name in names:
        path, shapes, consts = resolve(name)
        out = os.path.join(args.bench_dir, name)
        pkgs = {k: os.path.join(out, f"{k}.ftpkg") for k in PACKAGES if os.path.exists(os.path.join(out, f"{k}.ftpkg"))}
        prepared = prepare_model(path, shapes or None, consts or None)
        rows.append({"model": name, **time_packages(prepared, pkgs, threads, args.blocks, args.runs)})
    print_table(rows)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        write_csv(rows, os.path.join(args.out, "bench.csv"))
        plot(rows, os.path.join(args.out, "bench.png"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
