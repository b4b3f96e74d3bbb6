"""Parsing of `--input-shape NAME:1x3x224x224` and `--const NAME=VALUE` flags."""

from __future__ import annotations

import re

from tuner.core.errors import TunerError

_SHAPE_RE = re.compile(r"^(?P<name>.+):(?P<dims>\d+(?:[x,]\d+)*|\[\s*\d*(?:\s*,\s*\d+)*\s*\]|scalar)$")


def parse_input_shapes(values: list[str] | None) -> dict[str, tuple[int, ...]]:
    """`["x:1x3x8x8", "a:1x4 b:2"]` -> {"x": (1, 3, 8, 8), "a": (1, 4), "b": (2,)}.

    Each flag value may hold several `NAME:DIMS` separated by spaces; dims are `x`- or comma-separated, or
    `[1,3,8,8]` as tvmc wrote them; `scalar` (or `[]`) is a 0-d tensor.
    """
    shapes: dict[str, tuple[int, ...]] = {}
    for value in values or []:
        for item in value.split():
            m = _SHAPE_RE.match(item)
            if not m:
                raise TunerError(
                    f"cannot parse --input-shape {item!r}",
                    "write NAME:DIMS, e.g. --input-shape input:1x3x224x224 (or NAME:scalar)",
                )
            dims = m.group("dims").strip("[] ")
            shape = () if dims in ("", "scalar") else tuple(int(d) for d in re.split(r"[x,]", dims) if d.strip())
            if any(d <= 0 for d in shape):
                raise TunerError(f"--input-shape {item!r}: every dimension must be a positive integer")
            if m.group("name") in shapes:
                raise TunerError(f"--input-shape names input {m.group('name')!r} twice")
            shapes[m.group("name")] = shape
    return shapes


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
