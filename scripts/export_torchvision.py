#!/usr/bin/env python3
"""Export torchvision architectures (random weights, eval mode) to ONNX: held-out real topologies for the benchmark.

    python -m venv /tmp/torchenv && /tmp/torchenv/bin/pip install torch==2.13.0 torchvision onnx
    /tmp/torchenv/bin/python scripts/export_torchvision.py mobilenet_v2 mobilenet_v3_large efficientnet_b0 \\
        regnet_y_400mf resnext50_32x4d convnext_tiny
    .venv/bin/python scripts/bench.py mobilenet_v2 mobilenet_v3_large --variants none --unfused none

torch is not a dependency of fusion-tuner (../shared/MODELS.md): run this with an interpreter of its own. The
models land in models/ (git-ignored) as NAME.onnx, batch 1, 224x224, opset 17, exported by the TorchScript
exporter (which folds each BatchNorm into its conv, as a deployment export does). No weights are downloaded:
every model is built with `weights=None`, so latency is real and outputs are meaningless.
"""

from __future__ import annotations

import argparse
import os

MODELS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "models")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("names", nargs="+", help="torchvision.models builders (mobilenet_v2, efficientnet_b0, ...)")
    ap.add_argument("--out", default=MODELS_DIR)
    ap.add_argument("--size", type=int, default=224)
    args = ap.parse_args(argv)
    import torch

    # The torchvision wheel next to a CPU torch can carry a C extension built for another torch; its fake-kernel
    # registrations then fail at import ("operator torchvision::nms does not exist"). Exporting classification
    # models uses none of those ops: skip the registrations.
    torch.library.register_fake = lambda *a, **k: lambda fn: fn
    import torchvision

    torch.manual_seed(0)
    os.makedirs(args.out, exist_ok=True)
    for name in args.names:
        builder = getattr(torchvision.models, name, None)
        if builder is None:
            raise SystemExit(f"export_torchvision: torchvision.models has no {name!r}")
        model = builder(weights=None).eval()
        path = os.path.join(args.out, f"{name}.onnx")
        x = torch.randn(1, 3, args.size, args.size)
        torch.onnx.export(model, x, path, opset_version=17, dynamo=False, input_names=["input"], output_names=["out"])
        print(f"{path}: {os.path.getsize(path) / 1e6:.1f} MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
