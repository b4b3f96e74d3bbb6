"""Latency statistics (ms)."""

from __future__ import annotations

import numpy as np


def latency_stats(times_ms: list[float]) -> dict:
    a = np.asarray(times_ms, dtype=np.float64)
    return {
        "mean": float(a.mean()),
        "median": float(np.median(a)),
        "p10": float(np.percentile(a, 10)),
        "p90": float(np.percentile(a, 90)),
        "min": float(a.min()),
        "max": float(a.max()),
        "std": float(a.std()),
        "runs": int(a.size),
    }
