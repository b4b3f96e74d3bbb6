#!/usr/bin/env python3
"""Benchmark: float32 vs --dtype float16, untuned, side by side in one process, per model.

    python scripts/bench_precision.py [--target llvm] [--fusion tvm] [--repeat 30] [--json out.json] NAME ...

NAME: a synthetic model (cnn, transformer, mlp) or a real one from devtools.zoo. For each: kernels, the error
against ONNX Runtime in each precision, and interleaved latency (median, p10-p90) with the fp16/fp32 ratio.
On a CPU without native fp16 arithmetic (AVX2) expect fp16 to be slower: every fp16 op converts; on a GPU the
matmuls can use tensor cores.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from devtools.zoo import MODELS_DIR, REAL_MODELS  # noqa: E402

SYNTHETIC = {"cnn": {}, "transformer": {}, "mlp": {"x": (16, 32)}}


def model_args(name):
    if name in SYNTHETIC:
        return os.path.join(MODELS_DIR, f"{name}.onnx"), SYNTHETIC[name], {}
    m = REAL_MODELS[name]
    return m.path, m.shapes, m.consts


def bench(name, target, fusion, repeat) -> dict:
    import tvm

    from tuner.build.executable import build_prepared
    from tuner.core.precision import get_precision
    from tuner.core.target import resolve_target
    from tuner.frontend.onnx_model import prepare_model
    from tuner.fusion import get_strategy
    from tuner.report.reference import compare_outputs, run_onnxruntime
    from tuner.report.timing import Runnable, interleaved_latency
    from tuner.runtime import make_inputs

    path, shapes, consts = model_args(name)
    spec = resolve_target(target)
    if spec.config.get("num-cores"):
        os.environ.setdefault("TVM_NUM_THREADS", str(spec.config["num-cores"]))
    dev = tvm.cuda(0) if spec.is_gpu else tvm.cpu(0)
    row, runnables, feed, reference = {"model": name, "target": spec.key, "fusion": fusion}, [], None, None
    for precision in ("float32", "float16"):
        prepared = prepare_model(path, shapes, consts, precision=precision)
        result = build_prepared(prepared, spec, get_strategy(fusion))
        if feed is None:
            feed = make_inputs(
                [{"name": i.name, "shape": list(prepared.shapes[i.name]), "dtype": i.dtype} for i in prepared.inputs]
            )
            reference = run_onnxruntime(prepared.model, feed)
        r = Runnable.from_build(precision, result.executable, dev, [feed[i.name] for i in prepared.inputs])
        tol = get_precision(precision)
        check = compare_outputs(
            dict(zip([o.name for o in prepared.outputs], r.outputs())), reference, rtol=tol.rtol, atol=tol.atol
        )
        row[precision] = {"kernels": result.num_kernels, "verify_ok": check["ok"], "max_rel_err": check["max_rel_err"]}
        runnables.append(r)
    lat = interleaved_latency(runnables, repeat=repeat)
    for p in ("float32", "float16"):
        row[p]["median_ms"] = lat[p]["median"]
        row[p]["p10_p90_ms"] = [lat[p].get("p10"), lat[p].get("p90")]
    row["fp16_over_fp32"] = lat["float16"]["median"] / lat["float32"]["median"]
    return row


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("models", nargs="+")
    p.add_argument("--target", default="llvm")
    p.add_argument("--fusion", default="tvm")
    p.add_argument("--repeat", type=int, default=30)
    p.add_argument("--json")
    args = p.parse_args(argv)
    rows = []
    print("| model | kernels fp32 → fp16 | max rel err fp32 / fp16 | median ms fp32 | median ms fp16 | fp16 / fp32 |")
    print("|---|---|---|---|---|---|")
    for name in args.models:
        row = bench(name, args.target, args.fusion, args.repeat)
        rows.append(row)
        a, b = row["float32"], row["float16"]
        ok = "" if a["verify_ok"] and b["verify_ok"] else " (verify FAILED)"
        print(
            f"| {name} | {a['kernels']} → {b['kernels']} | {a['max_rel_err']:.1e} / {b['max_rel_err']:.1e}{ok} | "
            f"{a['median_ms']:.3f} | {b['median_ms']:.3f} | {row['fp16_over_fp32']:.2f}× |",
            flush=True,
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
