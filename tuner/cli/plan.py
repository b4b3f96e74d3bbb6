"""`fusion-tuner plan MODEL.onnx`: kernels, their ONNX nodes, and why each boundary exists."""

from __future__ import annotations

import argparse

from . import common
from . import help as H


def build_parser() -> argparse.ArgumentParser:
    p = common.parser("plan")
    common.add_model_args(p)
    common.add_target_arg(p)
    common.add_dtype_arg(p)
    common.add_fusion_arg(p)
    common.add_layout_arg(p)
    p.add_argument("--json", dest="json_file", metavar="FILE", help="write the plan as JSON ('-' for stdout)")
    p.add_argument("--svg", metavar="FILE", help="draw the ONNX graph with fused groups as boxes (needs Graphviz)")
    p.add_argument("--debug", action="store_true", help=H.DEBUG)
    return p


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    shapes, consts = common.parse_model_args(args)
    from ..plan import build_plan, render_svg

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
    else:
        render(plan)
        if args.json_file:
            import json

            from ..runtime.package import atomic_write

            def write(tmp):
                with open(tmp, "w") as f:
                    json.dump(plan.to_json(), f, indent=2)

            atomic_write(args.json_file, write)
    if args.svg:
        render_svg(plan, args.svg)
        if args.json_file != "-":
            common.console().print(f"drew {args.svg}")
    return 0


def render(plan) -> None:
    from rich.table import Table

    from ..plan.render import human_bytes as _human

    con = common.console()
    t = Table(
        title=f"{plan.model}: fusion={plan.strategy}, {plan.precision}, target={plan.target}", title_justify="left"
    )
    for col in ("#", "kernel", "ONNX nodes", "patterns", "in", "out", "kept on chip", "MFLOP"):
        t.add_column(col, justify="right" if col in ("#", "in", "out", "kept on chip", "MFLOP") else "left")
    for k, g in enumerate(plan.groups):
        t.add_row(
            str(k) if g.launched else "view",
            g.name,
            ", ".join(g.onnx_nodes),
            "+".join(m.pattern for m in g.members),
            _human(g.input_bytes),
            _human(g.output_bytes),
            _human(g.intermediate_bytes),
            f"{g.flops / 1e6:.2f}",
        )
    con.print(t)
    reasons = {}
    for b in plan.boundaries:
        reasons.setdefault(b.reason, []).append(b)
    con.print("[bold]boundaries[/] (why kernels were not fused):")
    for reason, items in sorted(reasons.items(), key=lambda kv: -len(kv[1])):
        ex = items[0]
        con.print(f"  {len(items):>3} × {reason}   e.g. {ex.producer} → {ex.consumer}")
    s = plan.summary()
    con.print(
        f"kernels {s['kernels_before']} → {s['kernels_after']} ({s['launches_saved']} launches saved); "
        f"intermediates kept off global memory: {_human(s['intermediate_bytes_saved'])} "
        f"(≈{_human(s['global_traffic_saved_bytes'])} of traffic)"
    )
    for n in plan.notes:
        con.print(f"[cyan]note:[/] {n}")
