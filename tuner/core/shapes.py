"""Input shapes with ranges: `x:1x3x48x32..2048` pins four dimensions and lets the last take any value from 32 to
2048. A shape is a tuple of ints and `DimRange`s; a pinned shape has ints only (what every package before ranges
had). The tune shapes of a range are the shapes the tuner specialises for (by default the middle and the top).
"""

from __future__ import annotations

from dataclasses import dataclass

from tuner.core.errors import TunerError


@dataclass(frozen=True)
class DimRange:
    """One dimension that takes any value in [lo, hi] at run time."""

    lo: int
    hi: int

    def __post_init__(self):
        if not 1 <= self.lo <= self.hi:
            raise TunerError(f"dimension range {self.lo}..{self.hi}: write LO..HI with 1 <= LO <= HI")

    @property
    def mid(self) -> int:
        return (self.lo + self.hi) // 2

    def __contains__(self, value: int) -> bool:
        return self.lo <= value <= self.hi

    def __str__(self) -> str:
        return f"{self.lo}..{self.hi}"


def normalize_shapes(shapes: dict | None) -> dict[str, tuple]:
    """The API's shapes as the CLI's: a dimension is an int, a `DimRange`, a (lo, hi) pair or a "lo..hi" string."""
    out = {}
    for name, shape in (shapes or {}).items():
        dims = []
        for d in shape:
            if isinstance(d, str) and ".." in d:
                lo, _, hi = d.partition("..")
                d = (int(lo), int(hi))
            if isinstance(d, (tuple, list)):
                if len(d) != 2:
                    raise TunerError(f"shapes[{name!r}]: a range is (lo, hi), got {d!r}")
                d = int(d[0]) if int(d[0]) == int(d[1]) else DimRange(int(d[0]), int(d[1]))
            dims.append(d if isinstance(d, DimRange) else int(d))
        out[name] = tuple(dims)
    return out


def is_ranged(shape) -> bool:
    return any(isinstance(d, DimRange) for d in shape)


def any_ranged(shapes: dict) -> bool:
    return any(is_ranged(s) for s in shapes.values())


def format_dims(shape) -> str:
    """(1, DimRange(8, 512)) -> "1x8..512", as --input-shape writes it."""
    return "x".join(str(d) for d in shape) if shape else "scalar"


def pinned_at(shapes: dict, pick) -> dict[str, tuple[int, ...]]:
    """Every range replaced by `pick(range)`: e.g. `pinned_at(shapes, lambda r: r.hi)`."""
    return {name: tuple(pick(d) if isinstance(d, DimRange) else d for d in s) for name, s in shapes.items()}


def default_tune_shapes(shapes: dict) -> list[dict[str, tuple[int, ...]]]:
    """The middle and the top of every range (once when they coincide), as TensorRT's opt and max."""
    out = []
    for pick in (lambda r: r.mid, lambda r: r.hi):
        pinned = pinned_at(shapes, pick)
        if pinned not in out:
            out.append(pinned)
    return out


def check_within(shapes: dict, pinned: dict, flag: str = "--tune-shape") -> None:
    """A pinned shape set (a tune shape) must give every input, and lie inside the ranges."""
    for name, shape in shapes.items():
        if name not in pinned:
            raise TunerError(f"{flag} gives no shape for input {name!r}", f"give every input: {', '.join(shapes)}")
        got = pinned[name]
        if len(got) != len(shape) or not all(
            (g in d) if isinstance(d, DimRange) else g == d for g, d in zip(got, shape)
        ):
            raise TunerError(
                f"{flag} {name}:{format_dims(got)} is outside --input-shape {name}:{format_dims(shape)}",
                "a tune shape takes a value inside each range and the pinned value elsewhere",
            )
    extra = set(pinned) - set(shapes)
    if extra:
        raise TunerError(f"{flag} names inputs the model does not have: {', '.join(sorted(extra))}")


def to_json(shape) -> list:
    """[1, [8, 512]]: a range as [lo, hi]."""
    return [[d.lo, d.hi] if isinstance(d, DimRange) else d for d in shape]


def pinned_for_report(shapes: dict | None) -> tuple[dict, str | None]:
    """(shapes, note): a report's measures (bytes, FLOPs, roofline) are of one shape, so ranges are taken at their
    middle, and the note says so (None when nothing was ranged)."""
    shapes = normalize_shapes(shapes)
    if not any_ranged(shapes):
        return shapes, None
    pinned = pinned_at(shapes, lambda r: r.mid)
    return pinned, (
        "measured at one shape: the ranges at their middle, "
        + " ".join(f"{n}:{format_dims(d)}" for n, d in pinned.items())
        + " (latency across a range: scripts/bench.py --sweep)"
    )
