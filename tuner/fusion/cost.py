"""`cost`: cost-guided grouping. The pattern library proposes candidate kernels; each is accepted only when
what it saves outweighs what it costs on this target. Unaccepted ops fall back to TVM FuseOps.

The rule (knobs in `CostKnobs`). For a candidate group G:

    materialised(G) = outputs of reductions or anchors (matmul, conv, mean, sum, max, softmax) inside G that
                      reach another reduction inside G. That is where FuseOps ends a kernel; element-wise
                      intermediates are inlined by FuseTIR and cost nothing, these the fused kernel keeps in a
                      scratch buffer.
    saves(G)        = 2 x bytes(materialised)   (the write and read FuseOps would send through global memory)
                    + launches(G)               (kernels FuseOps would have used for G, minus one) x launch cost
    refuse G when   - bytes(materialised) > on-chip budget: the scratch buffer spills, so the bytes are not
                      saved, and the fused kernel runs its stages one after another instead of as separate
                      parallel kernels (CPU: L2 per core x cores; CUDA: shared memory per SM x SMs);
                    - on CUDA, G has more than `max_ops_cuda` operators (register pressure);
                    - nothing is materialised (an anchor with an element-wise epilogue): FuseOps groups that as
                      well, and unlike a matched pattern it can extend the group further;
                    - a matmul/conv is materialised (its output feeds another reduction in G, as QK^T feeds
                      softmax): MetaSchedule cannot tile it inside G, so the tuned kernel is slower than the
                      split ones (measured, see `CostKnobs.fuse_anchor_into_reduction`).
    Patterns' own checks (constant weights, no cycles, K not a constant) still apply.

Every accepted and refused candidate is logged with its numbers (the strategy's decision log), and the plan
prints refusals as boundary reasons. Compared with `tvm`: LayerNorm and residual+LayerNorm become one kernel;
compared with `patterns`: attention score chains are left split (too big for the on-chip budget, or untileable).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from tuner.fusion import patterns as P
from tuner.fusion.base import FuseOpsGrouping, register

REDUCING_OPS = {
    "relax.matmul",
    "relax.nn.conv2d",
    "relax.nn.conv1d",
    "relax.mean",
    "relax.sum",
    "relax.max",
    "relax.nn.softmax",
    "relax.variance",
    "relax.nn.layer_norm",
}

ANCHOR_OPS = {"relax.matmul", "relax.nn.conv2d", "relax.nn.conv1d"}  # what multi-level tiling is for


@dataclass(frozen=True)
class CostKnobs:
    launch_us_cpu: float = 0.2  # measured by `compare` on this machine (VM, chained kernels): ~0.19 us
    launch_us_cuda: float = 4.0  # typical kernel launch on a discrete GPU
    max_ops_cuda: int = 24
    cuda_smem_per_sm: int = 228 * 1024  # sm_90; sm_80 has 164 KiB
    cuda_sms: int = 132
    # A matmul/conv whose output feeds another reduction in the same kernel (the attention chain QK^T -> softmax)
    # loses multi-level tiling: TVM 0.27's rule fails on such kernels, so tuning falls back to a space without it.
    # Measured on MiniLM-L3 (64 trials, 2 cores): the fused chain took 3.3 ms, split (matmul+scale+mask, softmax)
    # 2.6 ms. True fuses them anyway (the score chain on a GPU with a hand-written attention kernel, say).
    fuse_anchor_into_reduction: bool = False


def _cpu_budget() -> int:
    """L2 per core x cores (bytes): what a fused kernel's scratch buffers can use without spilling."""
    try:
        with open("/sys/devices/system/cpu/cpu0/cache/index2/size") as f:
            text = f.read().strip()
        l2 = int(text[:-1]) * (1024 if text.endswith("K") else 1024 * 1024) if text[-1] in "KM" else int(text)
    except (OSError, ValueError):
        l2 = 512 * 1024
    return l2 * (os.cpu_count() or 1)


def _nbytes(var) -> int:
    from tuner.core.ir import nbytes as nb

    return nb(var.ty)


def _op_name(expr) -> str:
    from tvm import relax

    return getattr(expr.op, "name", "") if isinstance(expr, relax.Call) else ""


def evaluate(ctx, target_kind: str, knobs: CostKnobs = CostKnobs()) -> tuple[bool, str]:
    """(accept, why) for one candidate group, from its matched bindings."""
    bindings = dict(ctx.matched_bindings.items())
    internal = set(bindings)
    reducing = {v for v, e in bindings.items() if _op_name(e) in REDUCING_OPS}
    users = {v: [u for u in ctx.var_usages.get(v, []) if u in internal] for v in internal}

    def feeds_a_reduction(v) -> bool:
        seen, frontier = set(), list(users[v])
        while frontier:
            u = frontier.pop()
            if u in reducing:
                return True
            if u not in seen:
                seen.add(u)
                frontier += users.get(u, [])
        return False

    # a reduction whose result reaches another reduction in G: FuseOps would end a kernel there
    materialised = [v for v in reducing if feeds_a_reduction(v)]
    mat_bytes = sum(_nbytes(v) for v in materialised)
    launch_us = knobs.launch_us_cuda if target_kind == "cuda" else knobs.launch_us_cpu
    budget = knobs.cuda_smem_per_sm * knobs.cuda_sms if target_kind == "cuda" else _cpu_budget()
    launches = len(materialised)
    saved = 2 * mat_bytes
    numbers = f"keeps {mat_bytes / 1024:.1f} KiB behind {launches} reduction(s), saves {launches} launch(es)"
    if target_kind == "cuda" and len(bindings) > knobs.max_ops_cuda:
        return False, f"refused: {len(bindings)} ops > {knobs.max_ops_cuda} (register pressure on CUDA)"
    if mat_bytes > budget:
        return False, (
            f"refused: {mat_bytes / 1024:.0f} KiB of scratch exceeds the on-chip budget "
            f"{budget / 1024:.0f} KiB (would spill, and serialise the stages)"
        )
    tiled = [v for v in materialised if _op_name(bindings[v]) in ANCHOR_OPS]
    if tiled and not knobs.fuse_anchor_into_reduction:
        return False, (
            f"refused: {_op_name(bindings[tiled[0]])[6:]} feeds another reduction in the kernel, and "
            "MetaSchedule cannot tile it there (its multi-level tiling fails; the kernel would be tuned "
            "without tiling)"
        )
    if launches == 0:
        return False, "left to FuseOps: no reduction behind a reduction (FuseOps groups this and can extend it)"
    return True, f"accepted: {numbers} (~{launches * launch_us:.1f} us of launches, {saved / 1024:.1f} KiB of traffic)"


def _vars_in(expr):
    from tvm import relax

    if isinstance(expr, relax.Var):
        yield expr
    elif isinstance(expr, relax.Call):
        for a in expr.args:
            yield from _vars_in(a)
    elif isinstance(expr, relax.Tuple):
        for f in expr.fields:
            yield from _vars_in(f)


@register
class CostFusion(FuseOpsGrouping):
    """Pattern candidates, each accepted only when it saves more than it costs on the target (`evaluate`)."""

    name = "cost"
    description = "cost-guided: pattern candidates accepted when they save more than they cost, then TVM FuseOps"

    def __init__(self, knobs: CostKnobs = CostKnobs()):
        super().__init__()
        self.knobs = knobs
        self.checks: list = []  # refusals by the pattern library's own checks

    def graph_passes(self, target, params) -> list:
        from tvm import relax

        kind = str(target.kind.name) if target is not None else "llvm"
        self.log.clear()
        self.checks.clear()

        def check_for(name, ann):
            pattern_check = P.check_for(name, ann, self.checks)

            def check(ctx) -> bool:
                if not pattern_check(ctx):
                    return False
                ok, why = evaluate(ctx, kind, self.knobs)
                bound = ctx.value_to_bound_var.get(ctx.matched_expr)
                self.log.append((name, bound.name if bound is not None else "?", why))
                return ok

            return check

        return P.pattern_passes(
            [
                relax.transform.FusionPattern(P.PREFIX + name, pat, ann or None, check_for(name, ann))
                for name, pat, ann in P.library()
            ]
        )

    def decisions(self) -> list:
        return [(c, v, why) for c, v, why in self.log if why.startswith("refused")] + list(self.checks)
