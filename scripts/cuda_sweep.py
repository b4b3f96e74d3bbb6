#!/usr/bin/env python3
"""Build-only CUDA sweep: every model compiles for a CUDA arch, with device code in the package, no kernel left
unbound; prints which dlight rule scheduled how many kernels, the kernels that fell to a later rule and why, and
build times (docs/cuda.md keeps the table).

    python scripts/cuda_sweep.py [--arch sm_90] [--json out.json] [MODEL.onnx ...]

With no models: the synthetic ones (scripts/make_models.py), the light_* architectures of the onnx wheel, and
the real models of devtools.zoo that scripts/fetch_models.py has fetched.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
RULES = ("matmul", "gemv", "reduction", "general_reduction", "fallback", "generic")


def default_models() -> list[tuple[str, dict, dict]]:
    """(path, --input-shape dict, --const dict) of every model the sweep covers."""
    from devtools.zoo import REAL_MODELS, light_models_dir

    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "models")
    import make_models

    make_models.main(["-o", here, *make_models.MODELS])
    pinned = {  # synthetic models with dynamic dimensions, at one shape each
        "mlp": {"x": (16, 32)},
        "line_reader": {"image": (1, 3, 16, 64)},
        "seq_encoder": {"input_ids": (1, 32), "attention_mask": (1, 32)},
    }
    out = [(os.path.join(here, f"{n}.onnx"), pinned.get(n, {}), {}) for n in make_models.MODELS]
    light = light_models_dir()
    out += [(os.path.join(light, f), {}, {}) for f in sorted(os.listdir(light)) if f.endswith(".onnx")]
    out += [(m.path, dict(m.shapes), dict(m.consts)) for m in REAL_MODELS.values() if os.path.exists(m.path)]
    return out


def build(path: str, shapes: dict, consts: dict, arch: str, work: str) -> dict:
    from tuner.commands.compile import compile_model
    from tuner.core.errors import TunerError

    name = os.path.splitext(os.path.basename(path))[0]
    out = os.path.join(work, f"{name}.ftpkg")
    t0 = time.perf_counter()
    try:
        _, manifest = compile_model(path, out, target=f"cuda:{arch}", shapes=shapes or None, consts=consts or None)
    except TunerError as err:
        return {"model": name, "ok": False, "error": err.message}
    rules = manifest.get("gpu_rules") or {}
    return {
        "model": name,
        "ok": bool(manifest.get("device_code")),
        "kernels": manifest["kernels"],
        "rules": rules.get("kernels", {}),
        "fell_back": rules.get("fell_back", {}),
        "build_s": round(time.perf_counter() - t0, 1),
    }


def table(rows: list[dict]) -> str:
    head = "| model | kernels | " + " | ".join(RULES) + " | fell to a later rule | build s |"
    lines = [head, "|" + "---|" * (len(RULES) + 4)]
    for r in rows:
        if not r["ok"]:
            lines.append(f"| {r['model']} | FAILED: {r.get('error', 'no device code')} |")
            continue
        counts = " | ".join(str(r["rules"].get(k, 0)) for k in RULES)
        lines.append(f"| {r['model']} | {r['kernels']} | {counts} | {len(r['fell_back'])} | {r['build_s']} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    import tempfile

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="*")
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    models = [(m, {}, {}) for m in args.models] or default_models()
    rows = []
    with tempfile.TemporaryDirectory(prefix="cuda-sweep-") as work:
        for path, shapes, consts in models:
            rows.append(build(path, shapes, consts, args.arch, work))
            r = rows[-1]
            print(f"{r['model']}: " + ("ok" if r["ok"] else f"FAILED {r.get('error')}"), flush=True)
    print(table(rows))
    for r in rows:
        for kernel, why in r.get("fell_back", {}).items():
            print(f"- {r['model']} {kernel}: {why}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
