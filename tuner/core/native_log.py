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


@contextlib.contextmanager
def native_stderr_to_file():
    """For one command: what C++ code (TVM's LOG(WARNING), ONNX Runtime's logger, onnxsim) and worker processes
    write to fd 2 goes to a log file, while Python's sys.stderr (our errors and hints) keeps the terminal. Yields
    a dict whose "path" is the log's file; the caller decides whether to keep it (`-v` shows all live instead)."""
    import tempfile

    sys.stdout.flush()
    sys.stderr.flush()
    fd, path = tempfile.mkstemp(prefix="fusion-tuner-native-", suffix=".log")
    terminal = os.dup(2)
    os.dup2(fd, 2)
    os.close(fd)
    python_stderr = sys.stderr
    on_fd2 = _writes_to_fd(python_stderr, 2)  # not when a test harness or a caller has replaced sys.stderr
    if on_fd2:
        sys.stderr = open(  # noqa: SIM115  (closed below)
            terminal, "w", buffering=1, encoding=getattr(python_stderr, "encoding", None) or "utf-8",
            errors="backslashreplace", closefd=False,
        )  # fmt: skip
    log = {"path": path, "keep": False}
    try:
        yield log
    finally:
        if on_fd2:
            sys.stderr.flush()
            sys.stderr.close()
            sys.stderr = python_stderr
        os.dup2(terminal, 2)
        os.close(terminal)
        if not log["keep"] or os.path.getsize(path) == 0:
            os.unlink(path)


def _writes_to_fd(stream, fd: int) -> bool:
    try:
        return stream.fileno() == fd
    except (AttributeError, OSError, ValueError):  # io.StringIO, pytest's capture
        return False
