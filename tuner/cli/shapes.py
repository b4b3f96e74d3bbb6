"""Parsing of `--input-shape NAME:1x3x224x224` and `--const NAME=VALUE` flags."""

from __future__ import annotations

import re

from tuner.core.errors import TunerError
from tuner.core.shapes import DimRange

_DIM = r"\d+(?:\.\.\d+)?"  # 224, or a range 32..2048
_SHAPE_RE = re.compile(
    rf"^(?P<name>.+):(?P<dims>{_DIM}(?:[x,]{_DIM})*|\[\s*(?:{_DIM})?(?:\s*,\s*{_DIM})*\s*\]|scalar)$"
)


def parse_input_shapes(values: list[str] | None, flag: str = "--input-shape") -> dict[str, tuple]:
    """`["x:1x3x8x8", "a:1x4 b:2"]` -> {"x": (1, 3, 8, 8), "a": (1, 4), "b": (2,)}; `x:1x3x48x32..2048` gives a
    `DimRange(32, 2048)` as the last dimension (tuner/core/shapes.py).

    Each flag value may hold several `NAME:DIMS` separated by spaces; dims are `x`- or comma-separated, or
    `[1,3,8,8]` as tvmc wrote them; `scalar` (or `[]`) is a 0-d tensor.
    """
    shapes: dict[str, tuple] = {}
    for value in values or []:
        for item in value.split():
            m = _SHAPE_RE.match(item)
            if not m:
                raise TunerError(
                    f"cannot parse {flag} {item!r}",
                    f"write NAME:DIMS, e.g. {flag} input:1x3x224x224, a range of one dimension as "
                    "input:1x3x48x32..2048 (or NAME:scalar)",
                )
            dims = m.group("dims").strip("[] ")
            tokens = [] if dims in ("", "scalar") else [d.strip() for d in re.split(r"[x,]", dims) if d.strip()]
            shape = tuple(_dim(item, t, flag) for t in tokens)
            if m.group("name") in shapes:
                raise TunerError(f"{flag} names input {m.group('name')!r} twice")
            shapes[m.group("name")] = shape
    return shapes


def _dim(item: str, token: str, flag: str):
    lo, sep, hi = token.partition("..")
    if int(lo) <= 0 or (sep and int(hi) <= 0):
        raise TunerError(f"{flag} {item!r}: every dimension must be a positive integer")
    if not sep:
        return int(lo)
    if int(lo) > int(hi):
        raise TunerError(f"{flag} {item!r}: the range {token} is empty", f"write LO..HI with LO <= HI, e.g. {hi}..{lo}")
    return int(lo) if int(lo) == int(hi) else DimRange(int(lo), int(hi))


def parse_consts(values: list[str] | None) -> dict[str, float | int | list]:
    """`["sr=16000", "axes=1,2"]` -> {"sr": 16000, "axes": [1, 2]}: inputs to freeze to a constant before import
    (a scalar, or the values of a 1-D shape, axes or pads input)."""
    consts: dict[str, float | int | list] = {}
    for value in values or []:
        for item in value.split():
            name, sep, raw = item.partition("=")
            if not sep or not name or not raw.strip("[]"):
                raise TunerError(
                    f"cannot parse --const {item!r}", "write NAME=VALUE, e.g. --const sr=16000 (or axes=1,2)"
                )
            parts = [_number(item, p) for p in raw.strip("[]").split(",")]
            consts[name] = parts if "," in raw or raw.startswith("[") else parts[0]
    return consts


def _number(item: str, raw: str) -> float | int:
    try:
        return int(raw)
    except ValueError:
        try:
            return float(raw)
        except ValueError:
            raise TunerError(f"--const {item!r}: {raw!r} is not a number") from None
