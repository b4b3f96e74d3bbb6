#!/usr/bin/env python3
"""Ablation of the untuned CPU levers, measured side by side with ONNX Runtime in one process:

    naive        the fused kernels as TVM lowers them (serial, unvectorised loop nests)
    default      + the default schedule (heuristic tiles, parallel, vectorised), weights in their ONNX layout
    default+pack + weights packed for the tiled access order at build time
    +algebra     + graph algebra before fusion: batch-norm folded into convolutions, Sum as adds
    +fast-math   + vectorisable exp/sigmoid/softmax approximations (NCHW convolutions)
    +nhwc, +nchwc  the same with convolutions in another layout (tuner/layout.py; --layouts)
    transposes kept  +nhwc with the layout transposes left where the conversion put them (tuner/transpose_sinking.py)
    channels unpadded  +nhwc with convs' channel counts as they are (tuner/channel_padding.py)
    direct 3x3   +nhwc with every 3x3 conv direct, none as Winograd (tuner/winograd.py)
    rows unpadded  +nhwc with matmuls over rows that no register block divides computed as they are, not padded
                 to whole blocks (tuner/schedule/padded_blocks.py: ViT's 197 tokens)
    1x1 convs kept  +nhwc with 1x1 convs on maps no register block divides (13 x 13) kept as convs, not matmuls
                 over their pixels (tuner/transform/pointwise_matmul.py)
    4-row tiles, spatial-64, 2-vector tiles, ...  +nhwc with one earlier default-schedule recipe each (the
                 labels of tuning/recipes.py's EARLIER_RECIPES: what each undoes is said there)
    +serial-small  the last layout variant with serial loops in kernels too small to pay for a parallel launch
                 (tuning/serial_small.py; what a package gets)

    python scripts/bench_levers.py cnn minilm_l3 magika

Every variant is checked against ONNX Runtime (max abs error printed); medians of alternating blocks of
back-to-back runs (scripts/bench.py's `blocks`), ONNX Runtime spinning as users run it.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def variants(plain, algebra, lowered):
    """{name: scheduled module} for the five levels; `plain` is lowered without the graph algebra and fast math,
    `algebra` without fast math."""
    from tuner.pipeline import pack_weights
    from tuner.schedule.default_schedule import schedule_untuned

    default, _ = schedule_untuned(plain.mod, plain.target)
    with_algebra, _ = schedule_untuned(algebra.mod, algebra.target)
    full, _ = schedule_untuned(lowered.mod, lowered.target)
    return {
        "naive": plain.mod,
        "default": default,
        "default+pack": pack_weights(default, plain.target),
        "+algebra": pack_weights(with_algebra, algebra.target),
        "+fast-math": pack_weights(full, lowered.target),
    }


def main(argv=None) -> int:
    import numpy as np
    import tvm
    from tvm.runtime.vm import VirtualMachine

    from scripts.bench import blocks, ort_session, resolve
    from tuner.build.executable import lower_prepared
    from tuner.core.target import resolve_target
    from tuner.frontend.onnx_model import prepare_model
    from tuner.fusion import get_strategy
    from tuner.pipeline import pack_weights
    from tuner.runtime import make_inputs
    from tuner.schedule.default_schedule import schedule_untuned
    from tuner.schedule.recipes import EARLIER_RECIPES
    from tuner.schedule.serial_small import SerialSmallKernels

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="*", default=["cnn", "minilm_l3", "magika"])
    ap.add_argument("--rounds", type=int, default=7, help="alternating blocks of runs")
    ap.add_argument("--runs", type=int, default=5, help="back-to-back runs per block (the first is dropped)")
    ap.add_argument("--layouts", default="nhwc,nchwc", help="conv layouts to add to +fast-math (comma-separated)")
    ap.add_argument("--skip", default="", help="variants not to build or time (comma-separated, e.g. naive)")
    args = ap.parse_args(argv)
    spec = resolve_target("llvm")
    threads = int(os.environ.setdefault("TVM_NUM_THREADS", str(spec.config.get("num-cores") or 1)))
    print(f"{spec.key}, {threads} threads")
    print(f"{'model':16} {'variant':17} {'median ms':>10} {'vs ORT':>7} {'max abs err':>12}")
    for name in args.models:
        path, shapes, consts = resolve(name)
        prepared = prepare_model(path, shapes or None, consts or None)
        plain = lower_prepared(prepared, spec, get_strategy("tvm"), algebra=False, fast_math=False)
        algebra = lower_prepared(prepared, spec, get_strategy("tvm"), fast_math=False)
        lowered = lower_prepared(prepared, spec, get_strategy("tvm"))
        feed = make_inputs(
            [{"name": i.name, "shape": list(prepared.shapes[i.name]), "dtype": i.dtype} for i in prepared.inputs]
        )
        sess = ort_session(prepared, threads)
        ref = sess.run(None, {i.name: feed[i.name] for i in sess.get_inputs()})[0]
        vms, errors = {}, {}
        built = variants(plain, algebra, lowered)
        for layout in filter(None, args.layouts.split(",")):
            relaid = lower_prepared(prepared, spec, get_strategy("tvm"), layout=layout)
            built[f"+{layout}"] = pack_weights(schedule_untuned(relaid.mod, spec)[0], spec)
            levers = ("transposes kept", "sink_transposes"), ("channels unpadded", "pad_channels")
            levers += ("direct 3x3", "winograd"), ("rows unpadded", "pad_blocks")
            levers += ("1x1 convs kept", "flatten_pointwise"), ("attention keys unpadded", "pad_attention")
            for label, lever in levers:
                if layout == "nhwc" and label not in args.skip.split(","):
                    off = lower_prepared(prepared, spec, get_strategy("tvm"), layout=layout, **{lever: False})
                    built[label] = pack_weights(schedule_untuned(off.mod, spec)[0], spec)
            if layout == "nhwc":  # the default schedule's earlier tile recipes, one lever each
                for label, recipe in EARLIER_RECIPES.items():
                    if label not in args.skip.split(","):
                        built[label] = pack_weights(schedule_untuned(relaid.mod, spec, recipe=recipe)[0], spec)
        last = [k for k in built if k.startswith("+")][-1]  # the package's layout
        built["+serial-small"] = SerialSmallKernels()(built[last])
        for label, mod in built.items():
            if label in args.skip.split(","):
                continue
            ex = tvm.compile(mod, target=spec.tvm_target(), relax_pipeline="default_build")
            vms[label] = VirtualMachine(ex, tvm.cpu())
            args_ = [tvm.runtime.tensor(feed[i.name]) for i in prepared.inputs]
            out = vms[label]["main"](*args_)
            out = out[0] if not hasattr(out, "numpy") else out
            errors[label] = float(np.abs(out.numpy() - ref).max())
        inputs = [tvm.runtime.tensor(feed[i.name]) for i in prepared.inputs]
        ort_feed = {i.name: feed[i.name] for i in sess.get_inputs()}
        runners = {k: (lambda vm=vm, x=inputs: vm["main"](*x)) for k, vm in vms.items()}
        runners["ort"] = lambda s=sess, f=ort_feed: s.run(None, f)
        med = blocks(runners, args.rounds, args.runs)
        ort_ms = med["ort"]
        for k in vms:
            ms = med[k]
            print(f"{name:16} {k:17} {ms:10.3f} {ms / ort_ms:7.2f} {errors[k]:12.2e}")
        print(f"{name:16} {'ONNX Runtime':17} {ort_ms:10.3f} {1.0:7.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
