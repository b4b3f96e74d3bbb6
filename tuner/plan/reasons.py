"""Why each boundary between two kernels was drawn: the strategy's own refusal log first, else the FuseOps rule
that applies (these mirror FuseOps' op-pattern rules; FuseOps itself keeps no decision log)."""

from __future__ import annotations

import re

from tuner.plan.model import Boundary, Group


def base_name(name: str) -> str:
    """A PrimFunc name without the numeric suffix TVM adds to duplicates (`add12` -> `add`)."""
    return re.sub(r"\d+$", "", name)


def boundaries(groups: list[Group], strategy, refused: dict | None = None) -> list[Boundary]:
    by_var = {g.var: g for g in groups}
    consumers: dict[str, list[Group]] = {}
    for g in groups:
        for src in g.inputs:
            if src in by_var:
                consumers.setdefault(src, []).append(g)
    out = []
    for g in groups:
        for src in g.inputs:
            p = by_var.get(src)
            if p is None:
                continue
            why = _refusal(p, g, refused or {}) or _reason(p, g, len(consumers[src]), strategy)
            out.append(Boundary(p.name, g.name, p.output_bytes, why))
    return out


def _refusal(p: Group, c: Group, refused: dict) -> str | None:
    """A candidate fusion the strategy refused whose root binding is in the consumer group."""
    for m in c.members:
        name = m.var.split("#")[0]
        if name in refused:
            return refused[name]
    return None


def _reason(p: Group, c: Group, n_consumers: int, strategy) -> str:
    if not strategy.fuses:
        return f"fusion disabled (strategy {strategy.name})"
    pk, ck = p.members[-1].pattern, c.members[0].pattern
    if base_name(c.members[0].primfunc) == "split" and any(m.merged for m in p.members):
        n = 1 + max(len(m.merged) for m in p.members)
        return (
            f"horizontal merge: the wide MatMul's output is split back into {n} branches; FuseOps does not fuse "
            "a multi-output split into its producer"
        )
    anchors = [m for m in c.members if m.pattern == "anchor"]
    if pk == "opaque" or ck == "opaque":
        name = p.members[-1].primfunc if pk == "opaque" else c.members[0].primfunc
        if "_sequence" in name:  # tuner/frontend/converters/recurrent_sequence.py
            return f"opaque op ({name}: every step of the recurrence in one hand-written kernel)"
        return f"opaque op ({name})"
    if n_consumers > 1:
        return f"output has {n_consumers} consumers"
    # FuseOpsByPattern names its groups fused_relax_*; FuseOps treats them as opaque calls
    closed = [g.name for g in (p, c) if g.name.startswith("fused_relax_")]
    if closed:
        return f"pattern kernel {closed[0][:40]} is closed: FuseOps does not extend a matched pattern"
    if pk == "reduce" and any(m.pattern in ("reduce", "anchor") for m in c.members):
        return "reduction after reduction"
    if any(m.pattern == "anchor" for m in p.members) and anchors:
        return "two anchor ops (out-ewise-fusable: conv/matmul/pool) never share a kernel"
    if anchors and c.members[0].pattern == "anchor":
        return f"{pk} producer not fused into an anchor's input (FuseOps fuses only after an anchor)"
    if pk == "reduce":
        return f"reduction followed by {ck}: FuseOps keeps a reduction's output in global memory here"
    if len(c.members) >= 256 or len(p.members) >= 256:
        return "max depth reached (relax.FuseOps.max_depth)"
    return f"{pk} -> {ck}: not grouped by {strategy.name}"
