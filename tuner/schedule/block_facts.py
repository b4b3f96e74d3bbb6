"""Facts about a TIR block that the hand-written schedules (row kernels, column reductions, pools, padding,
Winograd transforms) ask."""

from __future__ import annotations

MIN_WIDTH = 4  # narrower vectors than this are left scalar


def reduces(block) -> bool:
    """Does the block (a `tvm.tirx.SBlock`) have a reduction iterator?"""
    return any(int(it.iter_type) != 0 for it in block.iter_vars)


def extent(iter_var) -> int:
    """A block iterator's extent; 0 when it is not a constant (a symbolic dimension)."""
    return int(getattr(iter_var.dom.extent, "value", 0))


def vector_width(extent: int, lanes: int) -> int:
    """The widest power-of-two vector up to `lanes` that divides `extent`; 1 below MIN_WIDTH."""
    width = lanes
    while width >= MIN_WIDTH and extent % width:
        width //= 2
    return width if width >= MIN_WIDTH else 1
