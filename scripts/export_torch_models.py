#!/usr/bin/env python3
"""Export real architectures with random weights to ONNX: held-out topologies for the benchmark.

    python -m venv /tmp/torchenv && /tmp/torchenv/bin/pip install torch==2.13.0 torchvision transformers onnx
    /tmp/torchenv/bin/python scripts/export_torch_models.py mobilenet_v2 mobilenet_v3_large efficientnet_b0 \\
        regnet_y_400mf resnext50_32x4d convnext_tiny bert_mini bert_base
    .venv/bin/python scripts/bench.py mobilenet_v2 bert_mini --variants none --unfused none

torch is not a dependency of fusion-tuner (../shared/MODELS.md): run this with an interpreter of its own. Names
are torchvision.models builders (batch 1, 3x224x224) or the transformer configs below (`transformers`, batch 1,
sequence 128, int64 input_ids, attention_mask and token_type_ids, the three inputs sentence-transformers and
optimum export BERT with; bert_base is BERT-base's size, 110M parameters). The models land in models/
(git-ignored) as NAME.onnx, opset 17, exported by the TorchScript exporter (which folds each BatchNorm into its
conv, as a deployment export does). Nothing is downloaded: weights are random, so latency is real and outputs are
meaningless.
"""

from __future__ import annotations

import argparse
import os

MODELS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "models")
# BERT encoders by size (hidden, layers, heads; the FFN 4x hidden), after Google's compact BERT family
TRANSFORMERS = {
    "bert_tiny": (128, 2, 2), "bert_mini": (256, 4, 4), "bert_small": (512, 4, 8), "bert_base": (768, 12, 12),
}  # fmt: skip
SEQUENCE = 128


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("names", nargs="+", help=f"torchvision.models builders, or one of {sorted(TRANSFORMERS)}")
    ap.add_argument("--out", default=MODELS_DIR)
    ap.add_argument("--size", type=int, default=224, help="image side for torchvision models")
    args = ap.parse_args(argv)
    import torch

    # The torchvision wheel next to a CPU torch can carry a C extension built for another torch; its fake-kernel
    # registrations then fail at import ("operator torchvision::nms does not exist"). Exporting these models
    # uses none of those ops: skip the registrations.
    torch.library.register_fake = lambda *a, **k: lambda fn: fn
    torch.manual_seed(0)
    os.makedirs(args.out, exist_ok=True)
    for name in args.names:
        path = os.path.join(args.out, f"{name}.onnx")
        if name in TRANSFORMERS:
            _export_bert(torch, TRANSFORMERS[name], path)
        else:
            _export_torchvision(torch, name, args.size, path)
        print(f"{path}: {os.path.getsize(path) / 1e6:.1f} MB")
    return 0


def _export_torchvision(torch, name: str, size: int, path: str) -> None:
    import torchvision

    builder = getattr(torchvision.models, name, None)
    if builder is None:
        raise SystemExit(f"export_torch_models: torchvision.models has no {name!r} (nor is it {sorted(TRANSFORMERS)})")
    model = builder(weights=None).eval()
    x = torch.randn(1, 3, size, size)
    torch.onnx.export(model, x, path, opset_version=17, dynamo=False, input_names=["input"], output_names=["out"])


def _export_bert(torch, size: tuple[int, int, int], path: str) -> None:
    from transformers import BertConfig, BertModel

    hidden, layers, heads = size
    config = BertConfig(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads)
    config.intermediate_size = 4 * hidden
    bert = BertModel(config).eval()

    class Encoder(torch.nn.Module):  # plain tensors out: the exporter cannot flatten the model's output class
        def __init__(self):
            super().__init__()
            self.bert = bert

        def forward(self, input_ids, attention_mask, token_type_ids):
            out = self.bert(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
            return out.last_hidden_state, out.pooler_output

    ids = torch.randint(0, config.vocab_size, (1, SEQUENCE))
    mask = torch.ones(1, SEQUENCE, dtype=torch.long)
    segments = torch.zeros(1, SEQUENCE, dtype=torch.long)
    torch.onnx.export(
        Encoder(),
        (ids, mask, segments),
        path,
        opset_version=17,
        dynamo=False,
        input_names=["input_ids", "attention_mask", "token_type_ids"],
        output_names=["last_hidden_state", "pooler_output"],
    )


if __name__ == "__main__":
    raise SystemExit(main())
