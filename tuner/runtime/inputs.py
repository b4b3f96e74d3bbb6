"""A package's inputs: given ones checked against its input specs (shape, shared dimensions, index ranges), and
generated ones deterministic, refused before allocation when they cannot fit in memory."""

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


def check_shape(arr: np.ndarray, spec: dict, sizes: dict) -> None:
    """The input's shape against the package's: equal for a pinned input; for a ranged one each dimension inside
    its range, and a dimension that several inputs share (input_ids and attention_mask) the same in all."""
    ranges = spec.get("shape_range")
    if ranges is None:
        if tuple(arr.shape) != tuple(spec["shape"]):
            raise TunerError(
                f"input {spec['name']!r}: shape {list(arr.shape)}, the package was built for {spec['shape']}",
                "rebuild with --input-shape for other shapes (a range, LO..HI, takes any size in it)",
            )
        return
    want = "x".join(f"{lo}" if lo == hi else f"{lo}..{hi}" for lo, hi in ranges)
    if arr.ndim != len(ranges) or any(not lo <= d <= hi for d, (lo, hi) in zip(arr.shape, ranges)):
        raise TunerError(
            f"input {spec['name']!r}: shape {list(arr.shape)} is outside the package's range {want}",
            "pass a shape inside the range, or rebuild with a wider --input-shape range",
        )
    for axis, (d, dim_name) in enumerate(zip(arr.shape, spec.get("dim_names") or [])):
        if dim_name is None:
            continue
        seen, where = sizes.setdefault(dim_name, (d, spec["name"]))
        if seen != d:
            raise TunerError(
                f"input {spec['name']!r}: dimension {axis} is {d}, but {where!r} has {seen} for the same dimension "
                f"{dim_name!r}",
                "the model needs one size for both",
            )


def check_range(arr: np.ndarray, spec: dict) -> None:
    """An index input must stay inside the table it indexes: a clear error, never a read outside it."""
    lo, hi = spec["range"]
    if lo <= arr.min() and arr.max() <= hi:
        return
    at = np.unravel_index(int(np.flatnonzero((arr < lo) | (arr > hi))[0]), arr.shape)
    raise TunerError(
        f"input {spec['name']!r}: value {arr[at]} at {list(map(int, at))} is outside [{lo}, {hi}], the valid "
        f"indices of {spec.get('range_of', 'the tensor it indexes')}",
        f"give {spec['name']} values from {lo} to {hi}",
    )
