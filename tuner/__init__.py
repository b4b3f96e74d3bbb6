"""fusion-tuner: tune every fused kernel of an ONNX model with TVM, and see what fusion bought you.

Deployment needs only `tuner.load(path)`. `tuner.tune`, `tuner.compile` and `tuner.compare` are the commands as
functions (tuner.api); they, and every submodule, pull in the compiler only when they are called.
"""

from tuner.api import compare, compile, tune

__version__ = "0.1.0"


def load(path: str, device: str | None = None, flush_denormals: bool = False):
    """Load a `.ftpkg` package for inference; see `tuner.runtime`."""
    from tuner.runtime import load as _load

    return _load(path, device, flush_denormals)


__all__ = ["compare", "compile", "load", "tune", "__version__"]
