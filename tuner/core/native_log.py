"""What TVM's and onnxsim's C++ code print straight to the file descriptors, kept off the user's terminal."""

from __future__ import annotations

import contextlib
import os
import sys


@contextlib.contextmanager
def quiet_native_stderr():
    """Silence fd 2 (C++ warnings) for the block; unwound builders are collected inside it."""
    import gc
    import os
    import sys

    sys.stderr.flush()
    saved, devnull = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    try:
        yield
    finally:
        gc.collect()
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


@contextlib.contextmanager
def quiet_native_output():
    """onnxsim's C++ core prints warnings straight to fd 1/2; keep them out of our (JSON) output."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, devnull):
            os.close(fd)
