"""The deploy boundary: the package format, the loader and packaged device code.

Importing anything here pulls in the TVM runtime and numpy only: no ONNX, ONNX Runtime, Relax frontend or
MetaSchedule (tests/test_package.py checks it in a fresh process).
"""

from tuner.runtime.compat import check_compatible
from tuner.runtime.loader import Model, load, make_inputs, out_of_memory

__all__ = ["Model", "check_compatible", "load", "make_inputs", "out_of_memory"]
