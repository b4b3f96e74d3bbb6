"""Sizes in words, one way everywhere (plan, report, run): binary units, since every size here is a power-of-two
multiple of bytes that people compare with caches."""

from __future__ import annotations


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
