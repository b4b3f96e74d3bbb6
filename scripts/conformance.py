#!/usr/bin/env python3
"""Run the ONNX backend node tests through fusion-tuner (llvm) and through ONNX Runtime; print counts by op.

    python scripts/conformance.py [--only test_relu,test_add] [--json out.json] [--no-ort]

Cases run in a worker process that is restarted if TVM crashes on one (that case counts as `fail: crash`; our
result is recorded before ONNX Runtime runs the case, so a crash of ONNX Runtime is recorded as its own).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)


def ort_case(case) -> str:
    import numpy as np
    import onnxruntime as ort

    from devtools.conformance import case_data

    try:
        opts = ort.SessionOptions()
        opts.log_severity_level = 4
        sess = ort.InferenceSession(case.model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        inputs, expected = case_data(case)
        feed = {i.name: x for i, x in zip(sess.get_inputs(), inputs)}
        outs = sess.run(None, feed)
    except Exception:
        return "unsupported"

    def same(g, e) -> bool:  # tensors, or sequences of them (a sequence output once killed the worker)
        if isinstance(g, list) or isinstance(e, list):
            return isinstance(g, list) and isinstance(e, list) and len(g) == len(e) and all(map(same, g, e))
        g, e = np.asarray(g), np.asarray(e)
        if g.shape != e.shape:
            return False
        if e.dtype.kind in "iubSUO":
            return bool(np.array_equal(g, e))
        return bool(np.allclose(g, e, rtol=case.rtol, atol=case.atol, equal_nan=True))

    try:
        return "pass" if all(same(g, e) for g, e in zip(outs, expected)) else "fail"
    except Exception:
        return "fail"


def worker(names_file: str, out_file: str, with_ort: bool) -> None:
    import warnings

    warnings.simplefilter("ignore")
    from devtools.conformance import collect_cases, run_case

    names = json.load(open(names_file))
    done = set()
    if os.path.exists(out_file):
        done = {json.loads(line)["name"] for line in open(out_file) if line.strip()}
    cases = collect_cases(set(names) - done)
    order = {n: i for i, n in enumerate(names)}
    cases.sort(key=lambda c: order[c.name])
    with open(out_file, "a") as out:
        for case in cases:
            out.write(json.dumps({"name": case.name, "started": True}) + "\n")
            out.flush()
            r = run_case(case).to_json()
            if with_ort:
                r["ort"] = "crash"  # what stays recorded if ONNX Runtime takes the worker down
                out.write(json.dumps(r) + "\n")
                out.flush()
                r["ort"] = ort_case(case)
            out.write(json.dumps(r) + "\n")
            out.flush()


def cause(detail: str) -> str:
    """A failure's reason without the case's names and numbers, so that cases failing alike group together."""
    import re

    text = re.sub(r"<memory:[^>]*>|'[^']*'|\"[^\"]*\"", "X", detail)
    text = re.sub(r"max_abs_err [^)]*", "max_abs_err N", text)
    return re.sub(r"\d+", "N", text)[:110]


def print_causes(results) -> None:
    """Every failing and unsupported case, grouped by cause, largest group first, with examples."""
    for status in ("fail", "unsupported"):
        groups = collections.defaultdict(list)
        for r in results:
            if r["status"] == status:
                groups[cause(r["detail"])].append(r["name"])
        print(f"\n{status} by cause ({sum(map(len, groups.values()))} cases):")
        for why, names in sorted(groups.items(), key=lambda kv: -len(kv[1])):
            more = f" +{len(names) - 2} more" if len(names) > 2 else ""
            print(f"  {len(names):4}  {why}\n        e.g. {', '.join(names[:2])}{more}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", help="comma-separated case names")
    ap.add_argument("--json", help="write per-case results here")
    ap.add_argument("--no-ort", action="store_true")
    ap.add_argument("--work", default="/tmp/ft-conformance")
    ap.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        worker(*args.worker, with_ort=not args.no_ort)
        return 0
    import warnings

    warnings.simplefilter("ignore")
    from devtools.conformance import case_op, collect_cases

    t0 = time.time()
    cases = collect_cases(set(args.only.split(",")) if args.only else None)
    ops = {c.name: case_op(c) for c in cases}
    os.makedirs(args.work, exist_ok=True)
    names_file, out_file = os.path.join(args.work, "names.json"), os.path.join(args.work, "results.jsonl")
    json.dump([c.name for c in cases], open(names_file, "w"))
    if os.path.exists(out_file):
        os.unlink(out_file)
    while True:
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", names_file, out_file] + (
            ["--no-ort"] if args.no_ort else []
        )
        subprocess.run(cmd, cwd=ROOT)
        lines = [json.loads(line) for line in open(out_file) if line.strip()]
        finished = {x["name"] for x in lines if "status" in x}
        started = [x["name"] for x in lines if x.get("started") and x["name"] not in finished]
        for name in started:  # the worker died on it
            with open(out_file, "a") as f:
                f.write(
                    json.dumps(
                        {"name": name, "op": ops.get(name, "?"), "status": "fail", "detail": "crash", "ort": "?"}
                    )
                    + "\n"
                )
        finished |= set(started)
        if len(finished) >= len(cases):
            break
    results = {x["name"]: x for x in (json.loads(line) for line in open(out_file) if line.strip()) if "status" in x}
    ours = collections.Counter(r["status"] for r in results.values())
    ort = collections.Counter(r.get("ort") for r in results.values())
    by_op = collections.defaultdict(collections.Counter)
    for r in results.values():
        by_op[r["op"]][r["status"]] += 1
    print(f"{len(results)} node test cases, {len(by_op)} ops, {time.time() - t0:.0f} s")
    print(f"fusion-tuner (llvm): pass {ours['pass']}, fail {ours['fail']}, unsupported {ours['unsupported']}")
    pinned = [r for r in results.values() if r.get("pinned")]
    print(
        f"  {len(pinned)} cases had run-time shape/axes inputs bound from their test data as --const would "
        f"({sum(r['status'] == 'pass' for r in pinned)} of them pass)"
    )
    if not args.no_ort:
        print(f"ONNX Runtime (CPU):  pass {ort['pass']}, fail {ort['fail']}, unsupported {ort['unsupported']}")
    print("\nby op (pass/fail/unsupported):")
    for op in sorted(by_op):
        c = by_op[op]
        print(f"  {op:<28} {c['pass']:>4} {c['fail']:>4} {c['unsupported']:>4}")
    print_causes(results.values())
    if args.json:
        json.dump(list(results.values()), open(args.json, "w"), indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
