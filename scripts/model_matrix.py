#!/usr/bin/env python3
"""check -> compile (each fusion setting) -> load -> run -> verify against ONNX Runtime, for every model we know.

Prints a markdown table (for the README) and writes JSON. Models missing from models/ are fetched or made
first (scripts/make_models.py, scripts/fetch_models.py).

    python scripts/model_matrix.py [--fusion none,tvm] [--target llvm] [--json out.json] [NAME ...]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from devtools.zoo import MODELS_DIR, REAL_MODELS, light_models  # noqa: E402

SYNTHETIC = {"cnn": {}, "transformer": {}, "mlp": {"x": (4, 32)}}


def all_models():
    for name, shapes in SYNTHETIC.items():
        yield name, os.path.join(MODELS_DIR, f"{name}.onnx"), shapes, {}
    for path in light_models():
        yield os.path.basename(path)[:-5], path, {}, {}
    for m in REAL_MODELS.values():
        yield m.name, m.path, m.shapes, m.consts


def run_one(name, path, shapes, consts, fusions, target, repeat):
    from tuner.commands.check import check_model
    from tuner.commands.compile import compile_model
    from tuner.commands.run import run_package
    from tuner.core.errors import TunerError

    row = {"model": name, "check": None, "variants": {}}
    report = check_model(path, shapes, consts)
    row["check"] = (
        "buildable"
        if report.buildable
        else "; ".join([f"{u['op']}: {u['reason']}" for u in report.unsupported] + report.problems)
    )
    row["nodes"] = sum(report.ops.values())
    if not report.buildable:
        return row
    for fusion in fusions:
        with tempfile.TemporaryDirectory() as tmp:
            pkg = os.path.join(tmp, "m.ftpkg")
            t0 = time.perf_counter()
            try:
                result, manifest = compile_model(
                    path, pkg, target=target, fusion=fusion, shapes=shapes, consts=consts, db="none"
                )
                compile_s = time.perf_counter() - t0
                t0 = time.perf_counter()
                run = run_package(pkg, verify=path, repeat=repeat, warmup=1)
                row["variants"][fusion] = {
                    "kernels": manifest["kernels"],
                    "compile_s": round(compile_s, 1),
                    "run_verify_s": round(time.perf_counter() - t0, 1),
                    "median_ms": round(run["latency_ms"]["median"], 2),
                    "ok": run["verify"]["ok"],
                    "max_abs_err": run["verify"]["max_abs_err"],
                    "max_rel_err": run["verify"]["max_rel_err"],
                }
            except TunerError as err:
                row["variants"][fusion] = {"error": str(err)}
            except Exception as err:  # a compiler bug in one variant: record it, keep going
                row["variants"][fusion] = {"error": f"{type(err).__name__}: {str(err).strip().splitlines()[-1]}"}
        print(f"  {name} {fusion}: {row['variants'][fusion]}", file=sys.stderr, flush=True)
    return row


def to_markdown(rows, fusions) -> str:
    head = "| model | nodes | check | " + " | ".join(f"{f}: kernels / median ms / max rel err" for f in fusions) + " |"
    lines = [head, "|" + "---|" * (3 + len(fusions))]
    for r in rows:
        cells = []
        for f in fusions:
            v = r["variants"].get(f)
            if not v:
                cells.append("—")
            elif "error" in v:
                cells.append("error: " + v["error"].splitlines()[0][:80])
            else:
                cells.append(f"{v['kernels']} / {v['median_ms']} / {v['max_rel_err']:.1e} {'✅' if v['ok'] else '❌'}")
        lines.append(f"| {r['model']} | {r.get('nodes', '')} | {r['check'][:120]} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("names", nargs="*")
    ap.add_argument("--fusion", default="none,tvm")
    ap.add_argument("--target", default="llvm")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    fusions = args.fusion.split(",")
    rows = []
    for name, path, shapes, consts in all_models():
        if args.names and name not in args.names:
            continue
        if not os.path.exists(path):
            print(f"  {name}: {path} missing (run scripts/make_models.py / fetch_models.py)", file=sys.stderr)
            continue
        rows.append(run_one(name, path, shapes, consts, fusions, args.target, args.repeat))
    print(to_markdown(rows, fusions))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)
    return 0 if all(v.get("ok") for r in rows for v in r["variants"].values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
