#!/usr/bin/env python3
"""kill -9 a multi-round tuning run at random moments, resuming in between, and check the database each time.

    python scripts/kill_campaign.py --kills 20 --seed 16

Each round: `tune-model --resume` on the synthetic MLP (two batch sizes: several tasks, several rounds) into one
database, SIGKILL after a random delay, then scan the database: every line parses, no record is duplicated, the
manifest exists, and the records only grow. Lost trials per kill are bounded by what can be in flight: one
measured batch per task of the round (Knobs.num_trials_per_iter x tasks_per_round). A last resume runs to the end
and the package it builds is verified against ONNX Runtime.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)


def tune_cmd(model, db, out, trials):
    return [
        sys.executable, "-m", "tuner.cli.main", "tune-model", model, "--input-shape", "x:16x32", "--target", "llvm",
        "--trials", str(trials), "--db", db, "--resume", "-o", out, "--json", "--schedules", "none",
    ]  # fmt: skip


def check_db(db) -> dict:
    from tuner.tuning.database.records import scan

    s = scan(db)  # raises on a damaged workload line (records would point at the wrong kernels)
    return {
        "records": len(s.records),
        # a truncated last line is the write the kill interrupted (dropped on resume); anything else is damage
        "damaged_lines": sum(1 for n in s.notes if "truncated" not in n),
        "truncated_tail": any("truncated" in n for n in s.notes),
        "duplicates": len(s.records) - len(set(s.records)),
        "manifest": os.path.exists(os.path.join(db, "manifest.json")),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--seed", type=int, default=16)
    ap.add_argument("--trials", type=int, default=400)
    ap.add_argument("--min-delay", type=float, default=20.0, help="seconds after start of the earliest kill")
    ap.add_argument("--max-delay", type=float, default=60.0, help="seconds after start of the latest kill")
    args = ap.parse_args(argv)
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    import make_models

    rng = random.Random(args.seed)
    work = tempfile.mkdtemp(prefix="kill-campaign-")
    make_models.main(["-o", work, "mlp"])
    model, db = os.path.join(work, "mlp.onnx"), os.path.join(work, "db")
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "TVM_NUM_THREADS": os.environ.get("TVM_NUM_THREADS", "2")}
    rows, before = [], 0
    for k in range(args.kills):
        delay = rng.uniform(args.min_delay, args.max_delay)
        proc = subprocess.Popen(
            tune_cmd(model, db, os.path.join(work, "m.ftpkg"), args.trials),
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        time.sleep(delay)
        finished = proc.poll() is not None
        if not finished:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        state = check_db(db) if os.path.isdir(db) else {"records": 0, "damaged_lines": 0, "duplicates": 0}
        state.update(kill=k + 1, delay_s=round(delay, 1), finished=finished, new_records=state["records"] - before)
        if state["records"] < before:
            state["error"] = "records went down"
        before = state["records"]
        rows.append(state)
        print(json.dumps(state), flush=True)
    final = subprocess.run(
        [*tune_cmd(model, db, os.path.join(work, "m.ftpkg"), before + 16)], env=env, capture_output=True, text=True
    )
    summary = json.loads(final.stdout) if final.returncode == 0 else {"error": final.stderr[-500:]}
    end = check_db(db)
    bad = [r for r in rows if r.get("damaged_lines") or r.get("duplicates") or r.get("error")]
    print(
        json.dumps(
            {
                "kills": args.kills,
                "records": end["records"],
                "rounds_with_damage_or_duplicates": len(bad),
                "kills_that_left_no_new_record": sum(1 for r in rows if r["new_records"] == 0 and not r["finished"]),
                "final_resume_ok": final.returncode == 0,
                "final_verify": (summary.get("verify") or {}).get("ok"),
            }
        )
    )
    return 1 if bad or final.returncode != 0 else 0


if __name__ == "__main__":
    sys.exit(main())
