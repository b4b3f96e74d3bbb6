"""`fusion-tuner check MODEL.onnx`: exit 0 when buildable, 1 when not, 2 on bad input."""

from __future__ import annotations

import argparse

from tuner.cli import common


def build_parser() -> argparse.ArgumentParser:
    p = common.parser("check")
    common.add_model_args(p)
    common.add_output_flags(p)
    return p


def main(argv: list[str]) -> int:
    args = common.parse(build_parser(), argv)
    shapes, consts = common.parse_model_args(args)
    from tuner.commands.check import check_model

    report = check_model(args.model, shapes, consts)
    if args.json:
        common.print_json(report.to_json())
    else:
        render(report)
    return 0 if report.buildable else 1


def render(report) -> None:
    from rich.table import Table

    con = common.console()
    con.print(
        f"[bold]{report.path}[/]  opset {report.opset}, IR v{report.ir_version}, {sum(report.ops.values())} nodes"
        + (f", from {report.producer}" if report.producer else "")
    )
    io = Table(title="inputs and outputs", title_justify="left")
    for col in ("", "name", "dtype", "shape"):
        io.add_column(col)
    for kind, items in (("in", report.inputs), ("out", report.outputs)):
        for t in items:
            io.add_row(kind, t.name, t.dtype, "x".join("?" if d is None else str(d) for d in t.shape) or "scalar")
    con.print(io)
    ops = ", ".join(f"{op}×{n}" for op, n in report.ops.items())
    con.print(f"ops: {ops}")
    for note in report.preparation:
        con.print(f"[cyan]prepared:[/] {note}")
    for d in report.dynamic_inputs:
        dims = "x".join("?" if not isinstance(x, int) else str(x) for x in d["shape"])
        con.print(f"[yellow]needs --input-shape:[/] {d['name']} [{dims}] (dynamic dims {d['dynamic_dims']})")
    for u in report.unsupported:
        nodes = ", ".join(u["nodes"][:10]) + (f" (+{len(u['nodes']) - 10} more)" if len(u["nodes"]) > 10 else "")
        con.print(f"[red]unsupported:[/] {u['op']} ×{len(u['nodes'])}: {nodes} — {u['reason']}")
    for p in report.problems:
        con.print(f"[red]problem:[/] {p}")
    con.print("[green]buildable[/]" if report.buildable else "[red]not buildable[/]")
