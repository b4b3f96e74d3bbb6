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


class NodeRefusal(Exception):
    """Raised by one of our ONNX converters for a node it will not build: the reason in words and what to do.
    The importer names the node and reports it as unsupported (an UnsupportedModelError)."""

    def __init__(self, reason: str, hint: str):
        super().__init__(reason)
        self.hint = hint


def summarize_native_error(err: BaseException, limit: int = 300) -> str:
    """One readable line from a TVM error: its message without the printed IR, metadata notes or C++ frames."""
    import re

    lines = [ln.rstrip() for ln in str(err).strip().splitlines()]
    keep = [
        ln.strip()
        for ln in lines
        if ln.strip()
        and not ln.startswith((" ", "\t", "#", "@", "def ", "class ", "}", ")", "File ", "Traceback"))
        and "Metadata omitted" not in ln
        and not re.match(r"^\s*(R|T|I)\.", ln)
    ]
    # TVM puts the message last; "Check failed:" lines say why
    pick = next((ln for ln in keep if "Check failed" in ln), None) or (keep[-1] if keep else type(err).__name__)
    pick = re.sub(r"^(tvm\.error\.)?\w*Error:\s*", "", pick)
    return pick[:limit] + ("..." if len(pick) > limit else "")
