"""Latency statistics (ms), and the one way two latencies are compared wherever the tool prints a ratio."""

from __future__ import annotations

import numpy as np


def rotated(names: list, i: int) -> list:
    """`names` starting at position i (mod their count): the order of round i when timing runners side by side.
    In a fixed order the runner right after ONNX Runtime ran 1-4% slower (its spinning threads outlast a warm-up
    run; docs/performance.md), so every timing loop rotates."""
    k = i % len(names)
    return names[k:] + names[:k]


def latency_stats(times_ms: list[float], wall_s: float | None = None) -> dict:
    """Summary of per-run latencies; with the wall time of the runs, their throughput too."""
    a = np.asarray(times_ms, dtype=np.float64)
    out = {
        "mean": float(a.mean()),
        "median": float(np.median(a)),
        "p10": float(np.percentile(a, 10)),
        "p90": float(np.percentile(a, 90)),
        "p99": float(np.percentile(a, 99)),
        "min": float(a.min()),
        "max": float(a.max()),
        "std": float(a.std()),
        "runs": int(a.size),
    }
    if wall_s:
        out["throughput_per_s"] = a.size / wall_s
    return out


NOISE_BAND = 1.15  # these machines move by up to ~15% between runs of the same thing


def compare_latency(ours: list[float], theirs: list[float]) -> dict:
    """`ours` against `theirs`: the ratio of medians, and "within noise" when the two p10-p90 ranges overlap
    (these machines move by tens of percent between runs; a ratio inside that band is not a finding)."""
    return compare_stats(latency_stats(ours), latency_stats(theirs))


def compare_stats(ours: dict, theirs: dict) -> dict:
    """`compare_latency` on two `latency_stats` summaries."""
    ratio = ours["median"] / theirs["median"]
    overlap = bool(ours["p10"] <= theirs["p90"] and theirs["p10"] <= ours["p90"])
    # "within noise" only for a ratio noise could make: never beside 2.4x because one side's tail was long
    within_noise = overlap and 1 / NOISE_BAND <= ratio <= NOISE_BAND
    if within_noise:
        words = f"within noise ({ratio:.2f}×, p10-p90 ranges overlap)"
    else:
        words = f"{1 / ratio:.2f}× faster" if ratio < 1 else f"{ratio:.2f}× slower"
        if overlap:
            words += " (noisy: p10-p90 ranges overlap)"
    return {"ratio": ratio, "within_noise": within_noise, "overlap": overlap, "words": words}
