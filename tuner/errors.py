"""User-facing errors.

Everything a user can get wrong (a file, a flag, a package) raises `TunerError` with a message that names the
thing and a hint that says what to do. The CLI prints these without a traceback and exits with code 2.
"""

from __future__ import annotations


class TunerError(Exception):
    exit_code = 2

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message}\n  hint: {self.hint}"


class UnsupportedModelError(TunerError):
    """The model has ops the Relax ONNX frontend cannot convert; carries the check report."""

    def __init__(self, message: str, report=None, hint: str | None = None):
        super().__init__(message, hint)
        self.report = report
