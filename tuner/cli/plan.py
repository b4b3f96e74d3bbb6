"""`fusion-tuner plan MODEL.onnx`: kernels, their ONNX nodes, and why each boundary exists."""

from __future__ import annotations

import argparse

from tuner.cli import common
from tuner.cli import help as H
from tuner.core.units import human_bytes as _human


def build_parser() -> argparse.ArgumentParser:
    p = common.parser("plan")
    common.add_model_args(p)
    common.add_target_arg(p)
    common.add_dtype_arg(p)
    common.add_fusion_arg(p)
    common.add_layout_arg(p)
    p.add_argument(
        "--json",
        dest="json_file",
        nargs="?",
        const="-",
        metavar="FILE",
        help="print the plan as JSON instead of tables; with FILE, write it there and print the tables",
    )
    p.add_argument("--svg", metavar="FILE", help="draw the ONNX graph with fused groups as boxes (needs Graphviz)")
    common.add_verbosity_flags(p)
    p.add_argument("--debug", action="store_true", help=H.DEBUG)
    return p


def main(argv: list[str]) -> int:
    args = common.parse(build_parser(), argv)
    shapes, consts = common.parse_model_args(args)
    from tuner.plan import build_plan, render_svg

    plan = build_plan(
        args.model,
        target=args.target,
        fusion=args.fusion,
        shapes=shapes,
        consts=consts,
        precision=args.dtype,
        layout=args.layout,
    )
    if args.json_file == "-":
        common.print_json(plan.to_json())
    elif not args.quiet:
        render(plan, verbose=args.verbose)
        if args.json_file:
            import json

            from tuner.core.fsio import atomic_write

            def write(tmp):
                with open(tmp, "w") as f:
                    json.dump(plan.to_json(), f, indent=2)

            atomic_write(args.json_file, write)
    if args.svg:
        render_svg(plan, args.svg)
        if args.json_file != "-" and not args.quiet:
            common.console().print(f"drew {args.svg}")
    return 0


def render(plan, verbose: bool = False) -> None:
    from rich.table import Table

    from tuner.plan.attribution import node_label, ops_label

    con = common.console()
    t = Table(
        title=f"{plan.model}: fusion={plan.strategy}, {plan.precision}, target={plan.target}", title_justify="left"
    )
    columns = ["#", "ONNX ops", "first ONNX node", "in", "out", "kept on chip", "MFLOP"]
    columns += ["TVM kernel"] if verbose else []
    for col in columns:
        t.add_column(col, justify="right" if col in ("#", "in", "out", "kept on chip", "MFLOP") else "left")
    launched = 0
    for g in plan.groups:
        number = str(launched) if g.launched else "view"  # a reshape the VM runs as a view: no kernel, no launch
        launched += g.launched
        row = [number, ops_label([g]), node_label(g.onnx_nodes)]
        row += [_human(g.input_bytes), _human(g.output_bytes), _human(g.intermediate_bytes), f"{g.flops / 1e6:.2f}"]
        t.add_row(*row, *([g.name] if verbose else []))
    con.print(t)
    reasons = {}
    for b in plan.boundaries:
        reasons.setdefault(b.reason, []).append(b)
    con.print("[bold]boundaries[/] (why kernels were not fused):")
    by_name = {g.name: g for g in plan.groups}

    def node(kernel: str, last: bool) -> str:  # a kernel by its ONNX node at that boundary (TVM's name with -v)
        g = by_name.get(kernel)
        if verbose or g is None or not g.onnx_nodes:
            return kernel
        layout = " (its layout transpose)" if ops_label([g]).startswith("layout") else ""
        return g.onnx_nodes[-1 if last else 0] + layout

    for reason, items in sorted(reasons.items(), key=lambda kv: -len(kv[1])):
        ex = items[0]
        con.print(f"  {len(items):>3} × {reason}   e.g. {node(ex.producer, True)} → {node(ex.consumer, False)}")
    s = plan.summary()
    con.print(
        f"kernels {s['kernels_before']} → {s['kernels_after']} ({s['launches_saved']} launches saved); "
        f"intermediates kept off global memory: {_human(s['intermediate_bytes_saved'])} "
        f"(≈{_human(s['global_traffic_saved_bytes'])} of traffic)"
    )
    for n in plan.notes:
        con.print(f"[cyan]note:[/] {n}")
