#!/usr/bin/env python3
"""Subnormal weights: the package with them flushed at build time (the default) against the same package built
with them kept, beside ONNX Runtime as shipped, ONNX Runtime with denormals as zero, and OpenVINO f32 when
installed; alternating blocks in one process, the flushed package verified against ONNX Runtime.

    python scripts/bench_subnormal.py [MODEL.onnx ...]     # default: models/subnormal_conv.onnx (make_models.py)
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def bench(path: str, threads: int) -> dict:
    from tuner.build.executable import build_prepared, write_build
    from tuner.core.target import resolve_target
    from tuner.frontend.onnx_model import prepare_model
    from tuner.fusion import get_strategy
    from tuner.report.reference import compare_outputs, onnxruntime_session, openvino_runner, run_onnxruntime
    from tuner.report.timing import alternating_blocks
    from tuner.runtime import load

    spec = resolve_target("llvm")
    runners, models = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for label, flush in (("flushed", True), ("kept", False)):
            prepared = prepare_model(path, flush_subnormals=flush)
            pkg = os.path.join(tmp, f"{label}.ftpkg")
            write_build(build_prepared(prepared, spec, get_strategy("tvm")), pkg, 0.0)
            models[label] = load(pkg)
        feed = models["flushed"].random_inputs()
        for label, m in models.items():
            runners[label] = lambda m=m: m(**feed)
        sess = onnxruntime_session(path, threads)
        runners["ort"] = lambda: sess.run(None, feed)
        daz = onnxruntime_session(path, threads, denormal_as_zero=True)
        runners["ort_daz"] = lambda: daz.run(None, feed)
        ov = openvino_runner(path, feed, threads)
        if ov:
            runners["openvino"] = ov
        lat = {k: float(np.median(v)) for k, v in alternating_blocks(runners, n_blocks=8).items()}
        check = compare_outputs(models["flushed"](**feed), run_onnxruntime(path, feed, threads))
    return {"model": os.path.basename(path), "ms": lat, "verify_ok": check["ok"], "max_abs_err": check["max_abs_err"]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "models", "subnormal_conv.onnx")
    ap.add_argument("models", nargs="*", default=[here])
    args = ap.parse_args(argv)
    threads = int(os.environ.setdefault("TVM_NUM_THREADS", str(os.cpu_count())))
    for path in args.models:
        r = bench(path, threads)
        ms = r["ms"]
        print(f"{r['model']}: " + ", ".join(f"{k} {v:.3f} ms" for k, v in ms.items()))
        speed = f"  flushed vs kept: {ms['kept'] / ms['flushed']:.2f}x faster"
        speed += f"; flushed x ORT {ms['flushed'] / ms['ort']:.2f}"
        ov = f", x OpenVINO {ms['flushed'] / ms['openvino']:.2f}" if "openvino" in ms else ""
        print(speed + ov + f"; verify {'PASS' if r['verify_ok'] else 'FAIL'} (max abs err {r['max_abs_err']:.2g})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
