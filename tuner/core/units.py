"""Sizes in words, one way everywhere (plan, report, run): binary units, since every size here is a power-of-two
multiple of bytes that people compare with caches."""

from __future__ import annotations

import re


def human_bytes(n) -> str:
    """1536 -> "1.5 KiB"; None -> "—"."""
    if n is None:
        return "—"
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def parse_duration(text: str | float | None, flag: str = "--time-budget") -> float | None:
    """ "90s", "20m", "2h" (a unit is required) or a number of seconds -> seconds; None or "" -> None. `flag`
    names the option in errors."""
    from tuner.core.errors import TunerError

    if text is None or text == "":
        return None
    if isinstance(text, (int, float)):
        return float(text)
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*(s|m|h)?", text.strip())
    if not m:
        raise TunerError(f"{flag} {text!r}: write e.g. 90s, 20m or 2h")
    if m.group(2) is None:  # "10" is ten seconds to some and ten minutes to others: ask
        n = m.group(1)
        raise TunerError(f"{flag} {text!r}: a duration needs its unit", f"write {n}s, {n}m or {n}h")
    return float(m.group(1)) * {"s": 1, "m": 60, "h": 3600}[m.group(2)]
