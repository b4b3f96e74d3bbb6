"""`fusion-tuner compare MODEL.onnx -o reports/NAME/`: fused vs unfused, measured, with pictures."""

from __future__ import annotations

import argparse

from tuner.cli import common
from tuner.cli import help as H


def build_parser() -> argparse.ArgumentParser:
    from tuner.fusion import known_strategies

    p = common.parser("compare", epilog=H.COMPARE_EXIT)
    common.add_model_args(p)
    common.add_target_arg(p)
    common.add_dtype_arg(p)
    p.add_argument("--fusion", default="none,tvm", help=H.COMPARE_FUSION.format(known=", ".join(known_strategies())))
    tuned = p.add_mutually_exclusive_group()
    tuned.add_argument("--db", metavar="DIR", help=H.COMPARE_DB)
    tuned.add_argument("--trials", type=int, metavar="N", help=H.COMPARE_TRIALS)
    p.add_argument("--ort", action="store_true", help=H.COMPARE_ORT)
    p.add_argument("--repeat", type=int, default=20, metavar="N", help=H.REPEAT)
    p.add_argument("--peak-gflops", type=float, metavar="X", help=H.PEAK_GFLOPS)
    p.add_argument("--peak-gbps", type=float, metavar="X", help=H.PEAK_GBPS)
    p.add_argument("-o", "--output", required=True, metavar="DIR", help=H.COMPARE_OUTPUT)
    p.add_argument("--force", action="store_true", help=H.COMPARE_FORCE)
    common.add_output_flags(p)
    return p


def main(argv: list[str]) -> int:
    args = common.parse(build_parser(), argv)
    shapes, consts = common.parse_model_args(args)
    from tuner.commands.compare import compare

    con = common.console()
    doc = compare(
        args.model,
        args.output,
        target=args.target,
        fusion=args.fusion,
        db=args.db,
        trials=args.trials,
        ort=args.ort,
        repeat=args.repeat,
        shapes=shapes,
        consts=consts,
        precision=args.dtype,
        force=args.force,
        peak_gflops=args.peak_gflops,
        peak_gbps=args.peak_gbps,
        log=(lambda *a, **k: None) if args.json else con.print,
    )
    if args.json:  # the report.json document, on stdout
        common.print_json(doc)
    else:
        con.print(f"wrote {args.output}/report.md, report.html, report.json, kernels.csv, variants.csv")
    failed = [n for n, v in doc["variants"].items() if v["status"] != "ok"]
    return 3 if failed else 0
