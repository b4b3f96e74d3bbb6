"""The plan as Graphviz: ONNX nodes in one box per kernel, edges labelled with the bytes they carry.

A deep model drawn top to bottom is one column tens of thousands of points tall (a 120-kernel recognizer: 28,575
pt). Kernels are therefore laid out in columns of at most COLUMN_RANKS node rows, by the depth of their first
node: an edge into a later column does not constrain ranks, so the next column starts again at the top."""

from __future__ import annotations

import math

from tuner.core.units import human_bytes
from tuner.plan.model import FusionPlan

COLUMN_RANKS = 28  # node rows per column; about a screen and a half at Graphviz's default sizes


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
    group_column = _columns(plan, by_var)
    column = {node: group_column[id(plan.groups[k])] for node, k in owner.items()}

    def edge(a, b, attrs):  # an edge between columns must not pull the later column's rows down
        free = ", constraint=false" if column.get(a) != column.get(b) else ""
        lines.append(f"  {q(a)} -> {q(b)} [{attrs}{free}];")

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
                edge(p.onnx_nodes[-1], g.onnx_nodes[0], f"label={q(human_bytes(p.output_bytes))}, fontsize=8")
        nodes = g.onnx_nodes
        for a, b in zip(nodes, nodes[1:]):
            edge(a, b, 'color="#4c78a8", style=dashed')
    heads = {}  # each column's first node, chained invisibly on one row so columns read left to right
    for node in owner:
        heads.setdefault(column[node], node)
    if len(heads) > 1:
        ordered = [heads[c] for c in sorted(heads)]
        lines.append("  { rank=same; " + " ".join(q(n) for n in ordered) + " }")
        lines.extend(f"  {q(a)} -> {q(b)} [style=invis];" for a, b in zip(ordered, ordered[1:]))
    lines.append("}")
    return "\n".join(lines)


def _columns(plan: FusionPlan, by_var: dict) -> dict[int, int]:
    """Column of each group (by id): the depth of its first node row, in COLUMN_RANKS rows per column; the
    columns are balanced so the last is not a stub."""
    depth: dict[int, int] = {}
    for g in plan.groups:  # groups are in the graph's order: producers first
        preds = [by_var[v] for v in g.inputs if v in by_var and id(by_var[v]) in depth]
        depth[id(g)] = max((depth[id(p)] + max(1, len(p.onnx_nodes)) for p in preds), default=0)
    rows = max((depth[id(g)] + max(1, len(g.onnx_nodes)) for g in plan.groups), default=0)
    n_cols = max(1, math.ceil(rows / COLUMN_RANKS))
    per_col = math.ceil(rows / n_cols) if rows else 1
    return {gid: d // per_col for gid, d in depth.items()}


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
