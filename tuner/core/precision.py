"""The compute precisions `--dtype` offers, and the output tolerance each keeps."""

from __future__ import annotations

from dataclasses import dataclass

from tuner.core.errors import TunerError


@dataclass(frozen=True)
class Precision:
    name: str
    rtol: float  # the comparison rule of tuner.report.reference, loosened to what the precision can keep
    atol: float
    description: str


PRECISIONS = {
    "float32": Precision("float32", rtol=1e-3, atol=1e-4, description="as exported"),
    # fp16 keeps ~3 significant digits; errors grow with depth, so the bound scales with the output (atol term)
    "float16": Precision(
        "float16", rtol=2e-2, atol=2e-2, description="fp16 compute, fp32 accumulation in matmul/conv (ToMixedPrecision)"
    ),
}


def get_precision(name: str | None) -> Precision:
    name = (name or "float32").lower()
    name = {"fp32": "float32", "fp16": "float16", "half": "float16", "bf16": "bfloat16"}.get(name, name)
    if name == "bfloat16":
        raise TunerError(
            "--dtype bfloat16: TVM 0.27's mixed-precision pass produces float16 only",
            "use --dtype float16, or export the model in bfloat16 (its kernels then compute in bf16)",
        )
    if name not in PRECISIONS:
        raise TunerError(f"--dtype {name}: unknown precision", f"choose one of: {', '.join(PRECISIONS)}")
    return PRECISIONS[name]
