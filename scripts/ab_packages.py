#!/usr/bin/env python3
"""Two packages of one model, before and after a change, timed side by side.

    python scripts/ab_packages.py BEFORE.ftpkg AFTER.ftpkg [--blocks 10] [--repeats 2]
    python scripts/ab_packages.py PKG.ftpkg PKG.ftpkg --after-flush-denormals [--input-scale 1e-39]

Both are loaded in this process and called on the same inputs in alternating blocks of back-to-back calls
(`report.timing.alternating_blocks`, the bench's method); prints each repeat's medians and after/before. Build the
two packages from the same model with the code before and after the change (`git stash`, `compile -o`), or give
one package twice with `--after-flush-denormals` (AFTER loaded with `flush_denormals=True`); `--input-scale`
multiplies the float inputs (1e-39: subnormal inputs).
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("--blocks", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--after-flush-denormals", action="store_true", help="load AFTER with flush_denormals=True")
    ap.add_argument("--input-scale", type=float, default=1.0, help="multiply the float inputs by this")
    args = ap.parse_args(argv)
    os.environ.setdefault("TVM_NUM_THREADS", str(os.cpu_count()))

    import numpy as np

    import tuner
    from tuner.report.timing import alternating_blocks

    before = tuner.load(args.before)
    after = tuner.load(args.after, flush_denormals=args.after_flush_denormals)
    if before.input_names != after.input_names:
        sys.exit(f"ab_packages: the packages take different inputs: {before.input_names} vs {after.input_names}")
    feed = before.random_inputs()
    feed = {
        k: (v * np.float32(args.input_scale)).astype(v.dtype) if v.dtype.kind == "f" else v for k, v in feed.items()
    }
    for r in range(args.repeats):
        lat = alternating_blocks({"before": lambda: before(**feed), "after": lambda: after(**feed)}, args.blocks)
        b, a = float(np.median(lat["before"])), float(np.median(lat["after"]))
        print(f"repeat {r + 1}: before {b:.3f} ms, after {a:.3f} ms, after/before {a / b:.3f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
