"""Provenance: which ONNX nodes went into which kernel.

The importer names bindings after ONNX nodes (tuner.frontend.importer). Lowering is run twice, unfused (every op a
`call_tir` in main, named after its node) and grouped (FuseOps before FuseTIR, so each group is still a Relax
function whose inner bindings keep those names), and groups are matched back to unfused ops member by member,
by data flow rather than by name: FuseOps renames group outputs and shares one function between identical
groups, CombineParallelMatmul makes one op of several, FuseTransposeMatmul folds a transpose into a matmul.
"""

from __future__ import annotations

import re

from tuner.core.ir import flops, nbytes, op_pattern, primfuncs, view_source
from tuner.plan.model import FusionPlan, Group, Member
from tuner.plan.reasons import base_name, boundaries


def build_plan(
    model: str,
    target: str = "llvm",
    fusion: str = "tvm",
    shapes=None,
    consts=None,
    precision: str | None = None,
    layout: str = "auto",
) -> FusionPlan:
    """Import, lower unfused and grouped, match the groups back to ONNX nodes, and say why each boundary is there."""
    from tuner.core.shapes import pinned_for_report
    from tuner.core.target import TargetSpec, resolve_target
    from tuner.frontend.onnx_model import prepare_model
    from tuner.fusion import get_strategy
    from tuner.pipeline import import_for, import_model, lower

    strategy = get_strategy(fusion)
    spec = target if isinstance(target, TargetSpec) else resolve_target(target)
    shapes, ranged_note = pinned_for_report(shapes)
    prepared = prepare_model(model, shapes, consts, precision=precision)
    mod, _, prov = import_model(prepared, target_spec=spec)
    unfused = lower(mod, spec, get_strategy("none"), layout=layout)
    smod, params, _ = import_for(prepared, strategy, spec)
    grouped = lower(smod, spec, strategy, fuse_tir=False, params=params, layout=layout)
    groups = ProvenanceMatcher(unfused, grouped, prov).groups()
    launched = set(_launched_vars(grouped))
    for g in groups:
        g.launched = g.var in launched
    unfused_count = len(_launched_vars(unfused))  # a list: names may repeat
    refused = {}  # binding name -> "pattern: why", from the strategy's own decision log
    for cand, var, why in strategy.decisions():
        refused.setdefault(var, f"pattern check failed ({cand}): {why}")
    from tuner.pipeline import rewrite_notes
    from tuner.transform.layout import layout_fallback

    notes = [ranged_note] if ranged_note else []
    notes += list(prepared.notes) + [f"{why} at {var}" for var, why in refused.items()]
    if layout_fallback(grouped):
        notes.append(f"layout: {layout_fallback(grouped)}")
    notes += rewrite_notes(grouped)
    notes += _strategy_notes(strategy, groups, grouped, unfused, unfused_count)
    if spec.is_gpu:
        notes += _gpu_rule_notes(lower(smod, spec, strategy, params=params, layout=layout), spec)
    return FusionPlan(
        prepared.path,
        strategy.name,
        spec.key,
        groups,
        boundaries(groups, strategy, refused),
        unfused_count,
        notes,
        precision=prepared.precision,
    )


def _gpu_rule_notes(fused, spec) -> list[str]:
    """Which dlight rule schedules each CUDA kernel without a record, and why any fell to a later rule (what
    `compile` prints, build/gpu_rules.py)."""
    import collections

    from tuner.build.gpu_rules import schedule_kernels

    _, used, fell_back = schedule_kernels(fused, spec.tvm_target())
    counts = collections.Counter(used.values())
    notes = ["GPU schedules (dlight rule: kernels): " + ", ".join(f"{r} {n}" for r, n in sorted(counts.items()))]
    return notes + [f"GPU: {kernel} scheduled by a later rule: {why}" for kernel, why in fell_back.items()]


def _strategy_notes(strategy, groups, grouped, unfused, unfused_count) -> list[str]:
    notes = []
    if "horizontal" in strategy.name.split("+"):
        # CombineParallelMatmul leaves a split after each merged MatMul; none new means nothing merged
        def splits(funcs):
            return sum(n.startswith("split") for n in funcs)

        if splits(primfuncs(grouped)) <= splits(primfuncs(unfused)):
            notes.append(
                "horizontal: nothing to merge (no parallel MatMuls sharing an input with constant "
                "weights); built as the fallback grouping"
            )
    if strategy.fuses and sum(g.launched for g in groups) == unfused_count:
        notes.append(f"strategy {strategy.name} fused nothing in this model")
    return notes


def _tir_args(call) -> list:
    from tvm import relax

    a = call.args[1]
    return list(a.fields) if isinstance(a, relax.Tuple) else [a]


class ProvenanceMatcher:
    """Matches each op of the grouped module to the unfused op (or ops) it computes, by data flow."""

    def __init__(self, unfused, grouped, prov):
        import tvm

        self.call_tir = tvm.ir.Op.get("relax.call_tir")
        self.grouped = grouped
        self.grouped_funcs = primfuncs(grouped)
        self.names, ids = _refine_provenance(unfused["main"], prov)
        # Unfused bindings indexed by (primfunc base name, var args)
        self.index: dict = {}
        self.out_bytes: dict = {}  # unfused unique id -> bytes of its output
        self.absorbed: dict = {}  # unfused id -> ids of unfused ops a pass folded into it (FuseTransposeMatmul)
        self.uid = {}  # unfused Var -> unique id
        self.items: dict = {}  # (unfused id of a tuple, index) -> unfused id of its TupleGetItem binding
        self._index_unfused(unfused, ids)
        # Keyed by Var objects, not names: passes (FuseOpsByPattern) may give several bindings one name.
        self.to_unfused: dict = {}  # grouped-main Var -> unfused-main unique id
        self.gid: dict = {}  # grouped-main Var -> unique id used for groups and boundaries
        unfused_params = {p.name: self.uid.get(p, p.name) for p in unfused["main"].params}
        for p in grouped["main"].params:  # graph inputs keep their names in both lowerings
            self.to_unfused[p] = unfused_params.get(p.name, p.name)

    def _index_unfused(self, unfused, ids):
        from tvm import relax

        for k, b in enumerate(b for blk in unfused["main"].body.blocks for b in blk.bindings):
            self.uid[b.var] = ids[k]
            if (source := view_source(b.value)) is not None and source in self.uid:  # a view: data flows on
                self.uid[b.var] = self.uid[source]
            if isinstance(b.value, relax.TupleGetItem) and b.value.tuple_value in self.uid:
                self.items[(self.uid[b.value.tuple_value], int(b.value.index))] = ids[k]
            if isinstance(b.value, relax.Call) and b.value.op == self.call_tir:
                key = (
                    _computes(b.value.args[0].name_hint),
                    tuple(self.uid.get(a, a.name) for a in _tir_args(b.value) if isinstance(a, relax.Var)),
                )
                self.index.setdefault(key, []).append(ids[k])
                self.out_bytes[ids[k]] = nbytes(b.var.ty)

    def match(self, callee, args, env, out_nbytes):
        """The unfused binding this call computes, or a list of them for a horizontal merge."""
        from tvm import relax

        # args missing from env are group parameters bound to constants (constants are not vars unfused)
        vals = list(args) if env is None else [env[a] for a in args if isinstance(a, relax.Var) and a in env]
        width = max((len(v) for v in vals if isinstance(v, list)), default=0)
        if width:  # an op on merged tensors: the split hands each slice on; others repeat per slice
            if base_name(callee) == "split":
                return next(v for v in vals if isinstance(v, list))
            per = [
                self.match(callee, [v[i] if isinstance(v, list) else v for v in vals], None, None) for i in range(width)
            ]
            return per if all(per) else None
        hits = self.index.get((_computes(callee), tuple(vals)))
        if not hits and base_name(callee) == "NT_matmul" and len(vals) == 2:
            # FuseTransposeMatmul: matmul(a, permute_dims(b)) became one NT_matmul (unfused: a transpose, a matmul)
            t = self.index.get(("transpose", (vals[1],)))
            if t:
                t_id = t.pop(0)
                m = self.match("matmul", [vals[0], t_id], None, None)
                if m:
                    self.absorbed[m] = [t_id]
                    return m
        if not hits:
            return None
        same = [h for h in hits if self.out_bytes[h] == out_nbytes] if out_nbytes and len(hits) > 1 else []
        if same:  # several ops read this input (YOLO's two heads): the one with this output's size
            hits.remove(same[0])
            return same[0]
        if out_nbytes and len(hits) > 1 and out_nbytes > self.out_bytes[hits[0]]:
            # CombineParallelMatmul: one wide MatMul computes several unfused ones that share this input
            take = []
            while hits and sum(self.out_bytes[h] for h in take) < out_nbytes:
                take.append(hits.pop(0))
            return take
        return hits.pop(0)

    def member(self, call, env):
        callee = call.args[0].name_hint
        func = self.grouped_funcs.get(callee)
        src = self.match(callee, _tir_args(call), env, nbytes(call.ty))
        if isinstance(src, list):
            # the merge's own split has no ONNX node: it hands each slice to its original consumers
            ids = [] if base_name(callee) == "split" else src
        else:
            ids = [src, *self.absorbed.get(src, [])] if src else []
        refs = [self.names.get(i) for i in ids]
        first = refs[0] if refs else None
        merged = [(r.name, r.op_type) for r in refs[1:] if r is not None]
        return src, Member(
            (src[0] if isinstance(src, list) else src) or "?",
            callee,
            op_pattern(func),
            first.name if first else None,
            first.op_type if first else None,
            nbytes(call.ty),
            flops(func) if func is not None else 0.0,
            merged,
        )

    def _group_members(self, v):
        """(args, members, src, kernel) of a binding that launches a kernel, or None."""
        from tvm import relax

        if v.op == self.call_tir:
            src, m = self.member(v, self.to_unfused)
            return _tir_args(v), [m], src, v.args[0].name_hint
        if not (isinstance(v.op, relax.GlobalVar) and isinstance(self.grouped[v.op], relax.Function)):
            return None
        args, inner = list(v.args), self.grouped[v.op]
        env = {
            p: self.to_unfused[a]
            for p, a in zip(inner.params, args)
            if isinstance(a, relax.Var) and a in self.to_unfused
        }
        members, src = [], None
        for iblk in inner.body.blocks:
            for ib in iblk.bindings:
                if isinstance(ib.value, relax.Call) and ib.value.op == self.call_tir:
                    src, m = self.member(ib.value, env)
                    if src:
                        env[ib.var] = src
                    members.append(m)
                elif isinstance(ib.value, relax.Var) and ib.value in env:
                    env[ib.var] = env[ib.value]
                elif isinstance(ib.value, relax.TupleGetItem) and (item := self._item(env, ib.value)):
                    env[ib.var] = item
        result = inner.body.body
        if isinstance(result, relax.Tuple):  # a group with several outputs: main picks them with TupleGetItem
            outs = [env.get(f) for f in result.fields]
            src = outs if all(outs) else src
        return args, members, src, v.op.name_hint

    def _item(self, env, item):
        """The unfused id of `tuple[i]`: a slice of a horizontal merge, or the unfused TupleGetItem of an op with
        several outputs (Split), so data flow goes on through it."""
        src = env.get(item.tuple_value)
        if isinstance(src, list):
            return src[item.index]
        return self.items.get((src, int(item.index))) if src is not None else None

    def groups(self) -> list[Group]:
        import tvm
        from tvm import relax

        groups: list[Group] = []
        position = 0
        for blk in self.grouped["main"].body.blocks:
            for b in blk.bindings:
                position += 1
                self.gid[b.var] = f"{b.var.name}#{position}"
                v = b.value
                v = v if (source := view_source(v)) is None else source  # a view (the VM's reshape): read through
                if isinstance(v, relax.Var) and v in self.to_unfused:  # an alias binding
                    self.to_unfused[b.var] = self.to_unfused[v]
                    self.gid[b.var] = self.gid.get(v, self.gid[b.var])
                    continue
                if isinstance(v, relax.TupleGetItem) and (item := self._item(self.to_unfused, v)):
                    self.to_unfused[b.var] = item
                    if isinstance(self.to_unfused.get(v.tuple_value), list):  # a slice of a merge
                        self.gid[b.var] = self.gid.get(v.tuple_value, self.gid[b.var])
                    continue
                found = self._group_members(v) if isinstance(v, relax.Call) else None
                if found is None:
                    continue
                args, members, src, kernel = found
                if src:
                    self.to_unfused[b.var] = src
                groups.append(
                    Group(
                        kernel,
                        self.gid[b.var],
                        members,
                        [self.gid.get(a, a.name) for a in args if isinstance(a, relax.Var)],
                        sum(nbytes(a.ty) for a in args if isinstance(a, relax.Var)),
                        nbytes(b.var.ty),
                        sum(nbytes(a.ty) for a in args if isinstance(a, tvm.ir.expr.Constant)),
                    )
                )
        return groups


def _computes(primfunc: str) -> str:
    """The op a PrimFunc computes, whichever algorithm: a Winograd conv (tuner/winograd.py) is the conv it
    replaces, so an unfused lowering that took Winograd and a pattern group that kept its conv direct (its weights
    are the pattern function's parameters when legalized) still match."""
    base = base_name(primfunc)
    return "conv2d" if base == "conv2d_winograd" else base


def _refine_provenance(unfused_main, prov) -> dict:
    """var -> OnnxNodeRef for every binding of the unfused main.

    Passes create bindings with fresh names (DecomposeOpsForInference turns a BatchNorm into four ops). A run of
    unknown bindings between the bindings of ONNX nodes i and j belongs to the nodes strictly between i and j
    whose own bindings vanished (the BatchNorm), else to node j; a run after the last node's binding (the
    transposes back to the model's layout) to the node whose output each reads.
    """
    from tvm import relax

    order = {ref.name: k for k, ref in enumerate(prov.nodes)}
    all_bindings = [b for blk in unfused_main.body.blocks for b in blk.bindings]
    bindings = [b.var.name for b in all_bindings]
    ids = _unique_ids(unfused_main)
    # "lv"/"gv" names are the ones passes invent; they may collide with importer-internal ones.
    known = {
        i: prov.by_var[v]
        for v, i in zip(bindings, ids)
        if v in prov.by_var and prov.by_var[v].name in order and not re.fullmatch(r"[lg]v\d*", v)
    }
    uid = {b.var: i for b, i in zip(all_bindings, ids)}
    reads = {i: [uid[a] for a in relax.analysis.free_vars(b.value) if a in uid] for b, i in zip(all_bindings, ids)}
    present = {ref.name for ref in known.values()}
    result, pending, last, last_ref = {}, [], -1, None
    for v in ids + [None]:
        ref = known.get(v) if v is not None else None
        if v is not None and ref is None:
            pending.append(v)
            continue
        nxt = order[ref.name] if ref is not None else len(prov.nodes)
        vanished = [prov.nodes[k] for k in range(last + 1, nxt) if prov.nodes[k].name not in present]
        owner = vanished[-1] if vanished else ref
        for p in pending:
            if owner is None:  # after the last node (transposes back to the model's layout): their producer's
                owner_of_p = next((result[a] for a in reads.get(p, []) if a in result), last_ref)
                if owner_of_p is not None:
                    result[p] = owner_of_p
            else:
                result[p] = owner
        pending = []
        if ref is not None:
            result[v] = ref
            last, last_ref = nxt, ref
    return result, ids


def _unique_ids(func) -> list[str]:
    """Binding names made unique by position (passes may reuse a name within one function)."""
    return [f"{b.var.name}#{k}" for k, b in enumerate(b for blk in func.body.blocks for b in blk.bindings)]


def _launched_vars(mod) -> list[str]:
    """Bindings of main that still launch something after reshapes become views, as `name#position` ids
    (RewriteDataflowReshape rewrites values in place, so positions match the module it was given). Groups are
    fused into PrimFuncs first, as the build does: a group of transposes and reshapes that only moves size-1 axes
    (NHWC's (1,1,1,C) -> (1,C)) is a view once it is one PrimFunc with its blocks inlined, as every schedule does."""
    from tvm import relax

    try:
        mod = _inline_injective(relax.transform.FuseTIR()(mod))  # in place: one binding per group call
    except Exception:  # a module FuseTIR cannot take is counted group by group
        pass
    main = relax.transform.RewriteDataflowReshape()(mod)["main"]
    bindings = [b for blk in main.body.blocks for b in blk.bindings]
    return [
        f"{b.var.name}#{k}"
        for k, b in enumerate(bindings, 1)
        if isinstance(b.value, relax.Call)
        and (isinstance(b.value.op, relax.GlobalVar) or getattr(b.value.op, "name", "") == "relax.call_tir")
    ]


def _inline_injective(mod):
    """Each injective PrimFunc with its intermediate blocks inlined into the last (what the default and tuned
    schedules do first), so RewriteDataflowReshape sees the reshape it is."""
    import tvm
    from tvm.s_tir import Schedule

    out = mod
    for gv, func in mod.functions.items():
        if not isinstance(func, tvm.tirx.PrimFunc):
            continue
        try:
            sch = Schedule(func)
            blocks = sch.get_child_blocks(sch.get_sblock("root"))
        except Exception:  # no root block to read (an opaque kernel)
            continue
        if any(int(iv.iter_type) == 2 for b in blocks for iv in sch.get(b).iter_vars):  # a reduction: not a view
            continue
        for block in blocks[:-1]:
            try:
                sch.compute_inline(block)
            except Exception:  # not inlinable: the kernel launches as it is
                pass
        out = out.clone() if out is mod else out
        out[gv] = sch.mod["main"]
    return out
