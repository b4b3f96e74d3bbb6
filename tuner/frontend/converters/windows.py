"""Window functions (opset 17: HannWindow, HammingWindow, BlackmanWindow), which TVM 0.27 lacks. A window
depends only on its size, so it is computed here, at compile time, once that size is a constant (an initializer,
or a graph input pinned with --const); a size known only at run time is left to TVM (which refuses it)."""

from __future__ import annotations

import numpy as np

from tuner.frontend.converters.attrs import constant_values

# cos-series coefficients a_k of w[n] = sum_k (-1)^k a_k cos(2 pi k n / N), as ONNX's reference defines them
_COEFFICIENTS = {
    "HannWindow": (0.5, 0.5),
    "HammingWindow": (25 / 46, 1 - 25 / 46),
    "BlackmanWindow": (0.42, 0.5, 0.08),
}


def window(kind: str):
    def convert(bb, inputs, attrs):
        from onnx.helper import tensor_dtype_to_np_dtype
        from tvm import relax

        size = constant_values(inputs[0])
        if size is None:
            return None
        size = int(size[0])
        periodic = int(attrs.get("periodic", 1))
        dtype = tensor_dtype_to_np_dtype(int(attrs.get("output_datatype", 1)))
        n, period = np.arange(size, dtype=np.float64), size if periodic else size - 1
        w = sum((-1) ** k * a * np.cos(2 * np.pi * k * n / period) for k, a in enumerate(_COEFFICIENTS[kind]))
        return relax.const(np.asarray(w).astype(dtype))

    return convert
