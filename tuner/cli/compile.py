"""`fusion-tuner compile MODEL.onnx -o model.ftpkg`."""

from __future__ import annotations

import argparse

from tuner.cli import common
from tuner.cli import help as H


def build_parser() -> argparse.ArgumentParser:
    p = common.parser("compile")
    common.add_model_args(p)
    common.add_tune_shape_arg(p)
    common.add_target_arg(p)
    common.add_dtype_arg(p)
    common.add_fusion_arg(p)
    common.add_layout_arg(p)
    p.add_argument("--db", help=H.DB)
    p.add_argument("-o", "--output", required=True, help=H.OUTPUT_PKG)
    common.add_output_flags(p)
    return p


def main(argv: list[str]) -> int:
    args = common.parse(build_parser(), argv)
    shapes, consts = common.parse_model_args(args)
    from tuner.commands.compile import compile_model, compile_summary

    result, manifest = compile_model(
        args.model,
        args.output,
        target=args.target,
        fusion=args.fusion,
        layout=args.layout,
        db=args.db,
        shapes=shapes,
        consts=consts,
        precision=args.dtype,
        tune_shapes=common.parse_tune_shapes(args),
    )
    summary = compile_summary(args.output, result, manifest)
    if args.json:
        common.print_json(summary)
        return 0
    con = common.console()
    for note in manifest["preparation"]:
        con.print(f"[cyan]prepared:[/] {note}")
    if manifest["tuning_db"]:
        db = manifest["tuning_db"]
        con.print(
            f"tuning db {db['path']}: {db['applied']} of {db['kernels']} kernels tuned"
            + (f"; default schedules for: {', '.join(db['untuned'][:8])}" if db["untuned"] else "")
        )
    rules = manifest.get("gpu_rules") or {}
    if rules:
        con.print("GPU schedules (dlight rule: kernels): " + ", ".join(f"{r} {n}" for r, n in rules["kernels"].items()))
        for kernel, why in rules["fell_back"].items():
            con.print(f"[yellow]{kernel}[/] scheduled by a later rule: {why}")
    for v in manifest.get("variants") or []:
        shapes = " ".join(f"{k}:{'x'.join(map(str, d))}" for k, d in v["shapes"].items())
        con.print(f"  pinned build for {shapes}: {v['kernels']} kernels")
    con.print(
        f"[green]wrote[/] {args.output}: {manifest['kernels']} kernels, fusion={manifest['fusion']}, "
        f"{manifest['precision']}, "
        f"target={manifest['target']['key']}, built in {manifest['build_seconds']:.1f} s"
    )
    return 0
