#!/usr/bin/env python3
"""Trials per minute of `tune-model --rpc` with one and with two RPC servers on loopback, and measuring locally.

    python scripts/bench_rpc.py [--model models/cnn.onnx] [--budget 2m] [--servers 0,1,2]

Each configuration tunes the same model cold (empty database, --schedules none, --time-budget) and reports the
trials measured per minute of tuning. 0 servers is local measurement (no --rpc). On loopback the servers share
this machine's cores with the tuner's search and builds, so this measures the tuner's own overhead and
dispatch, not what separate devices would add; run it while nothing else runs.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)


def tune(model: str, budget: str, rpc: str | None, work: str) -> dict:
    cmd = [
        sys.executable, "-m", "tuner.cli.main", "tune-model", model, "--target", "llvm", "--time-budget", budget,
        "--schedules", "none", "--db", os.path.join(work, "db"), "-o", os.path.join(work, "m.ftpkg"), "--json",
        "--no-verify",
    ]  # fmt: skip
    if rpc:
        cmd += ["--rpc", rpc]
    t0 = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if r.returncode != 0:
        raise SystemExit(f"tune-model failed ({r.returncode}): {r.stderr.strip()[-800:]}")
    summary = json.loads(r.stdout)
    summary["wall_s"] = time.time() - t0
    return summary


def main(argv=None) -> int:
    from devtools.rpc_loopback import loopback

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "cnn.onnx"))
    ap.add_argument("--budget", default="2m", help="tuning time per configuration")
    ap.add_argument("--servers", default="0,1,2", help="RPC servers per configuration (0: local measurement)")
    args = ap.parse_args(argv)
    os.environ.setdefault("TVM_NUM_THREADS", str(os.cpu_count() or 1))
    print(f"{args.model}, --time-budget {args.budget}, TVM_NUM_THREADS={os.environ['TVM_NUM_THREADS']}")
    print(f"{'servers':>8} {'trials':>7} {'tuning s':>9} {'trials/min':>11}")
    for n in (int(x) for x in args.servers.split(",")):
        with tempfile.TemporaryDirectory() as work:
            if n == 0:
                s = tune(args.model, args.budget, None, work)
            else:
                with loopback(f"ft-bench-{n}", servers=n) as (spec, _):
                    s = tune(args.model, args.budget, spec, work)
        rate = s["trials"] / (s["tune_seconds"] / 60) if s["tune_seconds"] else 0.0
        label = "local" if n == 0 else str(n)
        print(f"{label:>8} {s['trials']:>7} {s['tune_seconds']:>9.0f} {rate:>11.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
