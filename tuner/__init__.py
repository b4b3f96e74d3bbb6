"""fusion-tuner: tune every fused kernel of an ONNX model with TVM, and see what fusion bought you.

Deployment needs only `tuner.load(path)`; everything else (import, fusion, tuning, reports) lives in
submodules that pull in the compiler when they are used.
"""

__version__ = "0.1.0"


def load(path: str, device: str | None = None):
    """Load a `.ftpkg` package for inference; see `tuner.runtime`."""
    from .runtime import load as _load

    return _load(path, device)


__all__ = ["load", "__version__"]
