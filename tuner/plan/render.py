"""The plan as Graphviz: ONNX nodes in one box per kernel, edges labelled with the bytes they carry."""

from __future__ import annotations

from tuner.core.units import human_bytes
from tuner.plan.model import FusionPlan


def to_dot(plan: FusionPlan) -> str:
    """Graphviz: ONNX nodes as boxes, each kernel a cluster around its nodes, edges labelled with bytes."""

    def q(s):
        return '"' + str(s).replace('"', r"\"") + '"'

    lines = [
        "digraph plan {",
        "  rankdir=TB; node [shape=box, style=rounded, fontname=Helvetica, fontsize=10];",
        f"  label={q(f'{plan.model} — fusion={plan.strategy}: {plan.unfused_kernels} → {plan.kernels} kernels')};",
        "  labelloc=t; fontname=Helvetica;",
    ]
    from tuner.plan.attribution import ops_label

    owner = {}
    for k, g in enumerate(plan.groups):
        color = "#4c78a8" if len(g.members) > 1 else "#999999"
        lines.append(
            f"  subgraph cluster_{k} {{ label={q(ops_label([g], width=48))}; "
            f"color={q(color)}; fontsize=9; style=rounded;"
        )
        for node in g.onnx_nodes or [f"{g.name}#{k}"]:
            if node not in owner:
                owner[node] = k
                op = next((m.onnx_op for m in g.members if m.onnx_node == node), "") or ""
                label = node + "\\n" + op
                lines.append(f"    {q(node)} [label={q(label)}];")
        lines.append("  }")
    by_var = {g.var: g for g in plan.groups}
    drawn_inputs = set()
    for g in plan.groups:
        for src in g.inputs:
            p = by_var.get(src)
            if p is None and g.onnx_nodes:  # a graph input: drawn once, as the ONNX graph's own input
                if src not in drawn_inputs:
                    drawn_inputs.add(src)
                    lines.append(
                        f'  {q("input:" + src)} [label={q(src)}, shape=ellipse, style=filled, fillcolor="#eeeeee"];'
                    )
                lines.append(f"  {q('input:' + src)} -> {q(g.onnx_nodes[0])};")
            elif p and (p.onnx_nodes or [None])[-1] and (g.onnx_nodes or [None])[0]:
                label = q(human_bytes(p.output_bytes))
                lines.append(f"  {q(p.onnx_nodes[-1])} -> {q(g.onnx_nodes[0])} [label={label}, fontsize=8];")
        nodes = g.onnx_nodes
        for a, b in zip(nodes, nodes[1:]):
            lines.append(f'  {q(a)} -> {q(b)} [color="#4c78a8", style=dashed];')
    lines.append("}")
    return "\n".join(lines)


def render_svg(plan: FusionPlan, path: str) -> None:
    import shutil
    import subprocess

    from tuner.core.errors import TunerError
    from tuner.core.fsio import atomic_write

    dot = shutil.which("dot")
    if not dot:
        raise TunerError("--svg needs Graphviz's `dot`", "install it: apt-get install graphviz (scripts/setup.sh does)")
    svg = subprocess.run([dot, "-Tsvg"], input=to_dot(plan).encode(), capture_output=True, check=True).stdout

    def write(tmp):
        with open(tmp, "wb") as f:
            f.write(svg)

    atomic_write(path, write)
