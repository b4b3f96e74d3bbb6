"""Make the example compare reports of the README: real models from the zoo, fused vs unfused.

    python scripts/example_reports.py [--trials N] [--fusion none,tvm] ppocr_det minilm_l3

Each report goes to reports/examples/<model>[-tunedN]/ (git-ignored). Models come from scripts/fetch_models.py.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main(argv=None) -> int:
    from devtools.zoo import REAL_MODELS
    from tuner.commands.compare import compare

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("models", nargs="+", choices=sorted(REAL_MODELS))
    p.add_argument("--trials", type=int, help="tune every variant with this many trials")
    p.add_argument("--fusion", default="none,tvm")
    p.add_argument("--repeat", type=int, default=20)
    p.add_argument("-o", "--output", default="reports/examples")
    args = p.parse_args(argv)
    for name in args.models:
        m = REAL_MODELS[name]
        if not os.path.exists(m.path):
            print(f"{m.path} missing: run python scripts/fetch_models.py {name}", file=sys.stderr)
            return 2
        out = os.path.join(args.output, name + (f"-tuned{args.trials}" if args.trials else ""))
        compare(
            m.path,
            out,
            target="llvm",
            fusion=args.fusion,
            trials=args.trials,
            ort=True,
            repeat=args.repeat,
            shapes=m.shapes,
            consts=m.consts,
            force=True,
        )
        print(f"wrote {out}/report.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
