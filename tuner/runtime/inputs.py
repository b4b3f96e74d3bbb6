"""Inputs generated for a package's input specs: deterministic, and refused before allocation when they cannot
fit in memory."""

from __future__ import annotations

import os

import numpy as np

from tuner.core.errors import TunerError


def mib(n) -> str:
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20)):
        if n >= scale:
            return f"{n / scale:,.1f} {unit}"
    return f"{n / 2**10:,.1f} KiB"


def spec_nbytes(spec: dict) -> int:
    try:
        return int(np.prod(spec["shape"])) * np.dtype(spec["dtype"]).itemsize
    except (TypeError, ValueError):
        return 0


def make_inputs(specs: list[dict], seed: int = 0, fill: str = "random") -> dict[str, np.ndarray]:
    """Deterministic inputs for the given specs: integers small and non-negative (they are often indices), inside
    the spec's index range when it has one; integer masks all ones."""
    _check_fits_in_memory(specs, fill)
    rng = np.random.default_rng(seed)
    out = {}
    for spec in specs:
        shape, dtype = tuple(spec["shape"]), np.dtype(spec["dtype"])
        if fill == "zeros":
            out[spec["name"]] = np.zeros(shape, dtype)
        elif fill == "ones":
            out[spec["name"]] = np.ones(shape, dtype)
        elif dtype.kind in "iu" and "mask" in spec["name"].lower():
            out[spec["name"]] = np.ones(shape, dtype)  # attention masks: attend everywhere
        elif dtype.kind in "iu":
            high = 2 if dtype.itemsize == 1 else 100
            if "range" in spec:  # an index: only rows the table has
                high = min(high, spec["range"][1] + 1)
            out[spec["name"]] = rng.integers(0, max(high, 1), size=shape).astype(dtype)
        elif dtype.kind == "b":
            out[spec["name"]] = rng.integers(0, 2, size=shape).astype(dtype)
        else:
            out[spec["name"]] = rng.standard_normal(shape).astype(dtype)
    return out


def _check_fits_in_memory(specs: list[dict], fill: str) -> None:
    """Refuse inputs larger than the free memory before numpy tries (random floats pass through float64)."""
    need = 0
    for spec in specs:
        n = spec_nbytes(spec)
        need += n * (3 if fill == "random" and np.dtype(spec["dtype"]).kind == "f" else 1)
    try:
        free = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return
    if need > free:
        sizes = ", ".join(f"{s['name']} {s['dtype']}{list(s['shape'])} ({mib(spec_nbytes(s))})" for s in specs)
        raise TunerError(
            f"generating the inputs needs about {mib(need)}; this machine has {mib(free)} free ({sizes})",
            "rebuild with smaller --input-shape, or pass real inputs with --inputs",
        )
