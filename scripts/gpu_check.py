#!/usr/bin/env python3
"""Every CUDA check in one run, for a machine with an NVIDIA GPU (and its CPU parts anywhere).

    python scripts/gpu_check.py MODEL_A.onnx MODEL_B.onnx [--target cuda] [--trials 32] [-o gpu_results/]
    python scripts/gpu_check.py ... --build-only        # no GPU: every build step, no measurement

Steps, each timed and recorded even when it fails (results.json is rewritten after every step, so a run cut
short still leaves what it finished):
  1. environment: GPU name and arch (nvidia-smi), TVM version, nvcc
  2. compile both models for CUDA (packages carry nvcc-compiled fatbins), load each in this process and verify
     against ONNX Runtime (CPU) on the same inputs
  3. tune-model the first model with a small budget, verify, untuned vs tuned latency
     (--build-only: generate the CUDA design space of its heaviest kernel, sample candidates, build them)
  4. --dtype float16 on the second model: compile and verify in fp16; tune it so the tensor-core (WMMA) design
     space is measured (--build-only: sample tensor-core candidates and build them)
  5. compare fused vs unfused (none,tvm) on the first model: report.md/html/json under OUTPUT/compare
Designed to finish in under ten minutes on one GPU (see ../shared/GPU.md for how the device machine is used).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# A fixed roofline for the report when the GPU's is not given: H200 SXM (fp32 CUDA cores, HBM3e copy)
H200 = {"peak_gflops": 67_000.0, "peak_gbps": 4_300.0}


def _environment(target: str) -> dict:
    import tvm

    from tuner.core.target import detect_gpu_arch, resolve_target

    env = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "tvm": tvm.__version__,
        "nvcc": shutil.which("nvcc"),
        "gpu_arch": detect_gpu_arch(),
    }
    try:
        env["gpu"] = (
            subprocess.run(
                ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=20,
            ).stdout.strip()
            or None
        )
    except (OSError, subprocess.TimeoutExpired):
        env["gpu"] = None
    env["target"] = resolve_target(target).key
    return env


def _build_candidates(model: str, target: str, shapes, precision: str | None = None) -> list[dict]:
    """Tuning candidates of the model's heaviest kernel, sampled and built (tuner.tuning.build_candidates)."""
    from tuner.core.target import resolve_target
    from tuner.frontend.onnx_model import prepare_model
    from tuner.fusion import get_strategy
    from tuner.pipeline import import_for, lower
    from tuner.tuning import build_candidates

    spec, strategy = resolve_target(target), get_strategy("tvm")
    mod, params, _ = import_for(prepare_model(model, shapes, None, precision=precision), strategy)
    return build_candidates(lower(mod, spec, strategy, params=params), spec, max_tasks=1, per_task=4)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("models", nargs=2, help="two ONNX models (static shapes, or use --input-shape NAME:DIMS)")
    p.add_argument("--input-shape", action="append", default=[])
    p.add_argument("--target", default="cuda")
    p.add_argument("--trials", type=int, default=32)
    p.add_argument("--repeat", type=int, default=20)
    p.add_argument("--build-only", action="store_true", help="no GPU: build steps only, nothing measured")
    p.add_argument("--peak-gflops", type=float, default=H200["peak_gflops"])
    p.add_argument("--peak-gbps", type=float, default=H200["peak_gbps"])
    p.add_argument("-o", "--output", default="gpu_results")
    args = p.parse_args(argv)

    from tuner.cli.shapes import parse_input_shapes
    from tuner.core.errors import TunerError

    shapes = parse_input_shapes(args.input_shape) or None
    os.makedirs(args.output, exist_ok=True)
    results = {"build_only": args.build_only, "steps": {}}
    out_json = os.path.join(args.output, "results.json")

    def save():
        tmp = out_json + ".tmp"
        with open(tmp, "w") as f:
            json.dump(results, f, indent=2, default=str)
        os.replace(tmp, out_json)

    def step(name, fn):
        t0 = time.perf_counter()
        try:
            value = fn()
            results["steps"][name] = {"ok": True, "seconds": round(time.perf_counter() - t0, 1), **(value or {})}
        except (TunerError, Exception) as err:  # record and go on: one failure must not hide the rest
            results["steps"][name] = {
                "ok": False,
                "seconds": round(time.perf_counter() - t0, 1),
                "error": getattr(err, "message", None) or f"{type(err).__name__}: {err}",
                "trace": traceback.format_exc(limit=4),
            }
        print(
            f"[gpu_check] {name}: {'ok' if results['steps'][name]['ok'] else 'FAILED'} "
            f"({results['steps'][name]['seconds']} s)",
            flush=True,
        )
        save()

    results["environment"] = _environment(args.target)
    if not args.build_only and not results["environment"]["gpu_arch"]:
        print("[gpu_check] no GPU found: rerun with --build-only for the build steps", file=sys.stderr)
        save()
        return 2
    save()

    from tuner.commands.compile import compile_model
    from tuner.runtime.package import read_package

    for model in args.models:
        name = os.path.splitext(os.path.basename(model))[0]

        def compile_and_verify(model=model, name=name):
            pkg = os.path.join(args.output, f"{name}.ftpkg")
            result, manifest = compile_model(model, pkg, target=args.target, shapes=shapes)
            out = {
                "package": pkg,
                "kernels": manifest["kernels"],
                "device_code": manifest.get("device_code"),
                "package_bytes": os.path.getsize(pkg),
            }
            read_package(pkg)  # checksums
            if not args.build_only:
                from tuner.commands.run import run_package

                run = run_package(pkg, verify=model, repeat=args.repeat)
                out.update({"verify": run["verify"], "latency_ms": run["latency_ms"]})
                if not run["verify"]["ok"]:
                    raise RuntimeError(f"{name}: outputs differ from ONNX Runtime: {run['verify']}")
            return out

        step(f"compile_verify_{name}", compile_and_verify)

    first = args.models[0]

    def cuda_graphs():
        """The same model built with and without CUDA graphs: the launch overhead fusion also attacks."""
        from tuner.build.executable import cuda_graph_calls

        out = {}
        for label, on in (("with", True), ("without", False)):
            pkg = os.path.join(args.output, f"cuda_graph_{label}.ftpkg")
            result, _ = compile_model(first, pkg, target=args.target, shapes=shapes, cuda_graph=on)
            out[label] = {"graph_calls": cuda_graph_calls(result.executable)}
            if not args.build_only:
                from tuner.commands.run import run_package

                out[label]["latency_ms"] = run_package(pkg, repeat=args.repeat)["latency_ms"]
        if not out["with"]["graph_calls"] or out["without"]["graph_calls"]:
            raise RuntimeError(f"CUDA graph built-ins: {out}")
        return out

    step("cuda_graphs", cuda_graphs)
    if not args.build_only:

        def tune():
            from tuner.commands.tune_model import tune_model
            from tuner.tuning import Knobs

            s = tune_model(
                first,
                os.path.join(args.output, "tuned.ftpkg"),
                target=args.target,
                knobs=Knobs(trials=args.trials),
                db=os.path.join(args.output, "db"),
                shapes=shapes,
            )
            return {
                k: s.get(k)
                for k in (
                    "trials",
                    "tune_seconds",
                    "latency_ms",
                    "speedup",
                    "verify",
                    "applied",
                    "kernels",
                    "default_schedules",
                )
            }

        step("tune_first_model", tune)
    else:

        def tuning_candidates():
            # what tuning does before measuring: design spaces, sampled candidates, built and thread-bound
            tasks = _build_candidates(first, args.target, shapes)
            if not tasks or any(t["built"] < t["candidates"] or t["thread_bound"] < t["candidates"] for t in tasks):
                raise RuntimeError(f"CUDA tuning candidates failed to build or are not thread-bound: {tasks}")
            return {"tasks": tasks}

        step("tuning_candidates_build_only", tuning_candidates)

    second = args.models[1]

    def half_precision():
        from tuner.tuning import uses_tensor_cores

        pkg = os.path.join(args.output, "fp16.ftpkg")
        result, manifest = compile_model(second, pkg, target=args.target, shapes=shapes, precision="float16")
        out = {"kernels": manifest["kernels"], "precision": manifest["precision"]}
        if args.build_only:
            tasks = _build_candidates(second, args.target, shapes, precision="float16")
            if not tasks or any(t["built"] < t["candidates"] or not t["tensor_core"] for t in tasks):
                raise RuntimeError(f"fp16 tensor-core candidates missing or failed to build: {tasks}")
            return {**out, "tasks": tasks}
        from tuner.commands.run import run_package
        from tuner.commands.tune_model import tune_model
        from tuner.tuning import Knobs

        untuned = run_package(pkg, verify=second, repeat=args.repeat)
        s = tune_model(
            second,
            os.path.join(args.output, "fp16_tuned.ftpkg"),
            target=args.target,
            knobs=Knobs(trials=args.trials),
            db=os.path.join(args.output, "db_fp16"),
            shapes=shapes,
            precision="float16",
        )
        return {
            **out,
            "untuned": {"verify": untuned["verify"], "latency_ms": untuned["latency_ms"]},
            "tuned": {k: s.get(k) for k in ("trials", "tune_seconds", "latency_ms", "speedup", "verify", "applied")},
            "untuned_uses_tensor_cores": uses_tensor_cores(result.fused_mod),
        }

    step("float16_tensor_cores", half_precision)

    def compare():
        from tuner.commands.compare import compare as run_compare

        doc = run_compare(
            first,
            os.path.join(args.output, "compare"),
            target=args.target,
            fusion="none,tvm",
            repeat=args.repeat,
            shapes=shapes,
            force=True,
            peak_gflops=args.peak_gflops,
            peak_gbps=args.peak_gbps,
            log=lambda *a: None,
        )
        return {
            "verdict": doc["verdict"],
            "measured": doc["measured"],
            "variants": {
                n: {
                    "status": v["status"],
                    "error": v["error"],
                    "launches": (v.get("metrics") or {}).get("launches"),
                    "latency_ms": v.get("latency_ms"),
                }
                for n, v in doc["variants"].items()
            },
        }

    step("compare_fused_unfused", compare)
    ok = all(s["ok"] for s in results["steps"].values())
    print(f"[gpu_check] wrote {out_json}: {'all steps ok' if ok else 'some steps FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
