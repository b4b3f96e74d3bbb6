"""The fusion plan: which ONNX nodes went into which kernel, what each kernel moves and computes, and why
each boundary between kernels was drawn.

Provenance: the importer names bindings after ONNX nodes (tuner.frontend). Lowering is run twice, unfused
(every op a `call_tir` in main, named after its node) and grouped (FuseOps before FuseTIR, so each group is
still a Relax function whose inner bindings keep those names), and groups are mapped back member by member.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# TVM's OpPatternKind (include/tvm/relax/op_attr_types.h)
# 4 is kOutEWiseFusable: conv/matmul/pool-like "anchors" that can absorb element-wise consumers
PATTERN_KINDS = {0: "elemwise", 1: "broadcast", 2: "injective", 3: "reduce", 4: "anchor", 7: "tuple", 8: "opaque"}


@dataclass
class Member:
    var: str
    primfunc: str
    pattern: str
    onnx_node: str | None
    onnx_op: str | None
    out_bytes: int
    flops: float
    # further ONNX nodes this one op stands for: the branches of a horizontal merge (CombineParallelMatmul), or
    # an op a pass folded into it (FuseTransposeMatmul's transpose)
    merged: list = field(default_factory=list)  # [(node name, op type)]


@dataclass
class Group:
    name: str  # the kernel (PrimFunc after FuseTIR)
    var: str  # binding in main
    members: list[Member]
    inputs: list[str]  # producer vars in main (kernel outputs or graph inputs)
    input_bytes: int
    output_bytes: int
    weight_bytes: int
    launched: bool = True  # False: a reshape the VM runs as a view, no kernel

    @property
    def intermediate_bytes(self) -> int:
        """Bytes of member outputs that stay inside the kernel (no global-memory round trip)."""
        return sum(m.out_bytes for m in self.members[:-1])

    @property
    def flops(self) -> float:
        return sum(m.flops for m in self.members)

    @property
    def onnx_nodes(self) -> list[str]:
        seen = []
        for m in self.members:
            for node in [m.onnx_node] + [n for n, _ in m.merged]:
                if node and node not in seen:
                    seen.append(node)
        return seen

    def to_json(self) -> dict:
        return {"name": self.name, "launched": self.launched, "onnx_nodes": self.onnx_nodes,
                "onnx_ops": sorted({op for m in self.members for op in [m.onnx_op] + [o for _, o in m.merged] if op}),
                "ops": [m.primfunc for m in self.members], "patterns": [m.pattern for m in self.members],
                "input_bytes": self.input_bytes, "output_bytes": self.output_bytes, "weight_bytes": self.weight_bytes,
                "intermediate_bytes_saved": self.intermediate_bytes, "flops": self.flops}


@dataclass
class Boundary:
    producer: str
    consumer: str
    tensor_bytes: int
    reason: str

    def to_json(self):
        return {"producer": self.producer, "consumer": self.consumer, "bytes": self.tensor_bytes, "reason": self.reason}


@dataclass
class FusionPlan:
    model: str
    strategy: str
    target: str
    groups: list[Group]
    boundaries: list[Boundary]
    unfused_kernels: int
    notes: list[str] = field(default_factory=list)
    precision: str = "float32"

    @property
    def kernels(self) -> int:
        return sum(g.launched for g in self.groups)

    def summary(self) -> dict:
        saved = sum(g.intermediate_bytes for g in self.groups)
        return {"kernels_before": self.unfused_kernels, "kernels_after": self.kernels,
                "launches_saved": self.unfused_kernels - self.kernels,
                "intermediate_bytes_saved": saved,
                # each saved intermediate was written once and read once unfused
                "global_traffic_saved_bytes": 2 * saved}

    def to_json(self) -> dict:
        return {"model": self.model, "strategy": self.strategy, "target": self.target,
                "precision": self.precision, "summary": self.summary(),
                "kernels": self.kernels, "groups": [g.to_json() for g in self.groups],
                "boundaries": [b.to_json() for b in self.boundaries], "notes": self.notes}


def _nbytes(ty) -> int:
    from tvm import relax

    if isinstance(ty, relax.TensorType) and ty.shape is not None:
        n = 1
        try:
            for d in ty.shape.values:
                n *= int(d)
        except (TypeError, ValueError):
            return 0
        import numpy as np

        return n * np.dtype(str(ty.dtype)).itemsize
    if isinstance(ty, relax.TupleType):
        return sum(_nbytes(f) for f in ty.fields)
    return 0


def _pattern(func) -> str:
    if func is None or func.attrs is None or "op_pattern" not in func.attrs:
        return "opaque"
    return PATTERN_KINDS.get(int(func.attrs["op_pattern"]), str(int(func.attrs["op_pattern"])))


def _flops(func) -> float:
    import tvm

    try:
        return float(tvm.s_tir.analysis.estimate_tir_flops(tvm.IRModule({"main": func})))
    except Exception:
        return 0.0


def _refine_provenance(unfused_main, prov) -> dict:
    """var -> OnnxNodeRef for every binding of the unfused main.

    Passes create bindings with fresh names (DecomposeOpsForInference turns a BatchNorm into four ops). A run of
    unknown bindings between the bindings of ONNX nodes i and j belongs to the nodes strictly between i and j
    whose own bindings vanished (the BatchNorm), else to node j.
    """
    import re

    order = {ref.name: k for k, ref in enumerate(prov.nodes)}
    bindings = [b.var.name for blk in unfused_main.body.blocks for b in blk.bindings]
    ids = _unique_ids(unfused_main)
    # "lv"/"gv" names are the ones passes invent; they may collide with importer-internal ones.
    known = {i: prov.by_var[v] for v, i in zip(bindings, ids)
             if v in prov.by_var and prov.by_var[v].name in order and not re.fullmatch(r"[lg]v\d*", v)}
    present = {ref.name for ref in known.values()}
    result, pending, last = {}, [], -1
    for v in ids + [None]:
        ref = known.get(v) if v is not None else None
        if v is not None and ref is None:
            pending.append(v)
            continue
        nxt = order[ref.name] if ref is not None else len(prov.nodes)
        vanished = [prov.nodes[k] for k in range(last + 1, nxt) if prov.nodes[k].name not in present]
        owner = vanished[-1] if vanished else ref
        for p in pending:
            if owner is not None:
                result[p] = owner
        pending = []
        if ref is not None:
            result[v] = ref
            last = nxt
    return result, ids


def _unique_ids(func) -> list[str]:
    """Binding names made unique by position (passes may reuse a name within one function)."""
    return [f"{b.var.name}#{k}" for k, b in enumerate(b for blk in func.body.blocks for b in blk.bindings)]


def build_plan(model: str, target: str = "llvm", fusion: str = "tvm", shapes=None, consts=None,
               precision: str | None = None) -> FusionPlan:
    import tvm
    from tvm import relax

    from .frontend import import_to_relax
    from .fusion import get_strategy
    from .lowering import import_for, lower, primfuncs
    from .onnx_model import prepare_model
    from .target import resolve_target

    strategy = get_strategy(fusion)
    spec = resolve_target(target)
    prepared = prepare_model(model, shapes, consts, precision=precision)
    mod, _, prov = import_to_relax(prepared)
    unfused = lower(mod, spec, get_strategy("none"))
    smod, params, _ = import_for(prepared, strategy)
    grouped = lower(smod, spec, strategy, fuse_tir=False, params=params)
    names, ids = _refine_provenance(unfused["main"], prov)
    call_tir = tvm.ir.Op.get("relax.call_tir")
    grouped_funcs = primfuncs(grouped)

    def tir_args(call):
        a = call.args[1]
        return list(a.fields) if isinstance(a, relax.Tuple) else [a]

    # Unfused bindings indexed by (primfunc base name, var args): groups are matched to them by data flow,
    # not by name (FuseOps renames group outputs and shares one function between identical groups).
    index: dict = {}
    out_bytes: dict = {}  # unfused unique id -> bytes of its output
    unfused_count = 0
    uid = {}  # unfused Var -> unique id
    for k, b in enumerate(b for blk in unfused["main"].body.blocks for b in blk.bindings):
        uid[b.var] = ids[k]
        if isinstance(b.value, relax.Call) and b.value.op == call_tir:
            unfused_count += 1
            key = (_base(b.value.args[0].name_hint),
                   tuple(uid.get(a, a.name) for a in tir_args(b.value) if isinstance(a, relax.Var)))
            index.setdefault(key, []).append(ids[k])
            out_bytes[ids[k]] = _nbytes(b.var.ty)
    # Keyed by Var objects, not names: passes (FuseOpsByPattern) may give several bindings one name.
    to_unfused: dict = {}  # grouped-main Var -> unfused-main unique id
    gid: dict = {}  # grouped-main Var -> unique id used for groups and boundaries

    absorbed: dict = {}  # unfused id -> ids of unfused ops a pass folded into it (FuseTransposeMatmul)

    def match(callee, args, env, nbytes):
        """The unfused binding this call computes, or a list of them for a horizontal merge."""
        # args missing from env are group parameters bound to constants (constants are not vars unfused)
        vals = list(args) if env is None else [env[a] for a in args if isinstance(a, relax.Var) and a in env]
        width = max((len(v) for v in vals if isinstance(v, list)), default=0)
        if width:  # an op on merged tensors: the split hands each slice on; others repeat per slice
            if _base(callee) == "split":
                return next(v for v in vals if isinstance(v, list))
            per = [match(callee, [v[i] if isinstance(v, list) else v for v in vals], None, None) for i in range(width)]
            return per if all(per) else None
        hits = index.get((_base(callee), tuple(vals)))
        if not hits and _base(callee) == "NT_matmul" and len(vals) == 2:
            # FuseTransposeMatmul: matmul(a, permute_dims(b)) became one NT_matmul (unfused: a transpose, a matmul)
            t = index.get(("transpose", (vals[1],)))
            if t:
                t_id = t.pop(0)
                m = match("matmul", [vals[0], t_id], None, None)
                if m:
                    absorbed[m] = [t_id]
                    return m
        if not hits:
            return None
        if nbytes and len(hits) > 1 and nbytes > out_bytes[hits[0]]:
            # CombineParallelMatmul: one wide MatMul computes several unfused ones that share this input
            take = []
            while hits and sum(out_bytes[h] for h in take) < nbytes:
                take.append(hits.pop(0))
            return take
        return hits.pop(0)

    def member(call, env):
        callee = call.args[0].name_hint
        func = grouped_funcs.get(callee)
        src = match(callee, tir_args(call), env, _nbytes(call.ty))
        if isinstance(src, list):
            # the merge's own split has no ONNX node: it hands each slice to its original consumers
            ids = [] if _base(callee) == "split" else src
        else:
            ids = [src, *absorbed.get(src, [])] if src else []
        refs = [names.get(i) for i in ids]
        first = refs[0] if refs else None
        merged = [(r.name, r.op_type) for r in refs[1:] if r is not None]
        return src, Member((src[0] if isinstance(src, list) else src) or "?", callee, _pattern(func),
                           first.name if first else None, first.op_type if first else None, _nbytes(call.ty),
                           _flops(func) if func is not None else 0.0, merged)

    # graph inputs keep their names in both lowerings
    unfused_params = {p.name: uid.get(p, p.name) for p in unfused["main"].params}
    for p in grouped["main"].params:
        to_unfused[p] = unfused_params.get(p.name, p.name)
    groups: list[Group] = []
    position = 0
    for blk in grouped["main"].body.blocks:
        for b in blk.bindings:
            position += 1
            gid[b.var] = f"{b.var.name}#{position}"
            v = b.value
            if isinstance(v, relax.Var) and v in to_unfused:  # an alias binding
                to_unfused[b.var] = to_unfused[v]
                gid[b.var] = gid.get(v, gid[b.var])
                continue
            if isinstance(v, relax.TupleGetItem) and isinstance(to_unfused.get(v.tuple_value), list):
                to_unfused[b.var] = to_unfused[v.tuple_value][v.index]  # one slice of a horizontal merge
                gid[b.var] = gid.get(v.tuple_value, gid[b.var])
                continue
            if not isinstance(v, relax.Call):
                continue
            if v.op == call_tir:
                args = tir_args(v)
                src, m = member(v, to_unfused)
                members = [m]
                kernel = v.args[0].name_hint
            elif isinstance(v.op, relax.GlobalVar) and isinstance(grouped[v.op], relax.Function):
                args = list(v.args)
                inner = grouped[v.op]
                env = {p: to_unfused[a] for p, a in zip(inner.params, args) if isinstance(a, relax.Var) and a in to_unfused}
                members, src = [], None
                for iblk in inner.body.blocks:
                    for ib in iblk.bindings:
                        if isinstance(ib.value, relax.Call) and ib.value.op == call_tir:
                            src, m = member(ib.value, env)
                            if src:
                                env[ib.var] = src
                            members.append(m)
                        elif isinstance(ib.value, relax.Var) and ib.value in env:
                            env[ib.var] = env[ib.value]
                kernel = v.op.name_hint
            else:
                continue
            if src:
                to_unfused[b.var] = src
            groups.append(Group(kernel, gid[b.var], members,
                                [gid.get(a, a.name) for a in args if isinstance(a, relax.Var)],
                                sum(_nbytes(a.ty) for a in args if isinstance(a, relax.Var)),
                                _nbytes(b.var.ty),
                                sum(_nbytes(a.ty) for a in args if isinstance(a, tvm.ir.expr.Constant))))
    launched = set(_launched_vars(grouped))
    for g in groups:
        g.launched = g.var in launched
    unfused_count = len(_launched_vars(unfused))  # a list: names may repeat
    refused = {}  # binding name -> "pattern: why", from the strategy's own decision log
    for cand, var, why in strategy.decisions():
        refused.setdefault(var, f"pattern check failed ({cand}): {why}")
    boundaries = _boundaries(groups, strategy, refused)
    notes = list(prepared.notes)
    notes += [f"{why} at {var}" for var, why in refused.items()]
    if "horizontal" in strategy.name.split("+"):
        # CombineParallelMatmul leaves a split after each merged MatMul; none new means nothing merged
        splits = lambda funcs: sum(n.startswith("split") for n in funcs)
        if splits(grouped_funcs) <= splits(primfuncs(unfused)):
            notes.append("horizontal: nothing to merge (no parallel MatMuls sharing an input with constant "
                         "weights); built as the fallback grouping")
    if strategy.fuses and sum(g.launched for g in groups) == unfused_count:
        notes.append(f"strategy {strategy.name} fused nothing in this model")
    return FusionPlan(prepared.path, strategy.name, spec.key, groups, boundaries, unfused_count, notes,
                      precision=prepared.precision)


def _launched_vars(mod) -> list[str]:
    """Bindings of main that still launch something after reshapes become views, as `name#position` ids
    (RewriteDataflowReshape rewrites values in place, so positions match the module it was given)."""
    from tvm import relax

    main = relax.transform.RewriteDataflowReshape()(mod)["main"]
    bindings = [b for blk in main.body.blocks for b in blk.bindings]
    return [f"{b.var.name}#{k}" for k, b in enumerate(bindings, 1)
            if isinstance(b.value, relax.Call) and (isinstance(b.value.op, relax.GlobalVar) or
                                                    getattr(b.value.op, "name", "") == "relax.call_tir")]


def _base(name: str) -> str:
    import re

    return re.sub(r"\d+$", "", name)


def _boundaries(groups: list[Group], strategy, refused: dict | None = None) -> list[Boundary]:
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
    if _base(c.members[0].primfunc) == "split" and any(m.merged for m in p.members):
        n = 1 + max(len(m.merged) for m in p.members)
        return (f"horizontal merge: the wide MatMul's output is split back into {n} branches; FuseOps does not fuse "
                "a multi-output split into its producer")
    anchors = [m for m in c.members if m.pattern == "anchor"]
    if pk == "opaque" or ck == "opaque":
        return f"opaque op ({p.members[-1].primfunc if pk == 'opaque' else c.members[0].primfunc})"
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


def to_dot(plan: FusionPlan) -> str:
    """Graphviz: ONNX nodes as boxes, each kernel a cluster around its nodes, edges labelled with bytes."""

    def q(s):
        return '"' + str(s).replace('"', r"\"") + '"'

    lines = ["digraph plan {", "  rankdir=TB; node [shape=box, style=rounded, fontname=Helvetica, fontsize=10];",
             f"  label={q(f'{plan.model} — fusion={plan.strategy}: {plan.unfused_kernels} → {plan.kernels} kernels')};",
             "  labelloc=t; fontname=Helvetica;"]
    owner = {}
    for k, g in enumerate(plan.groups):
        color = "#4c78a8" if len(g.members) > 1 else "#999999"
        lines.append(f"  subgraph cluster_{k} {{ label={q(g.name if len(g.name) < 48 else g.name[:45] + '...')}; "
                     f"color={q(color)}; fontsize=9; style=rounded;")
        for node in g.onnx_nodes or [f"{g.name}#{k}"]:
            if node not in owner:
                owner[node] = k
                op = next((m.onnx_op for m in g.members if m.onnx_node == node), "") or ""
                label = node + "\\n" + op
                lines.append(f"    {q(node)} [label={q(label)}];")
        lines.append("  }")
    by_var = {g.var: g for g in plan.groups}
    for g in plan.groups:
        for src in g.inputs:
            p = by_var.get(src)
            if p and (p.onnx_nodes or [None])[-1] and (g.onnx_nodes or [None])[0]:
                lines.append(f"  {q(p.onnx_nodes[-1])} -> {q(g.onnx_nodes[0])} [label={q(_human(p.output_bytes))}, fontsize=8];")
        nodes = g.onnx_nodes
        for a, b in zip(nodes, nodes[1:]):
            lines.append(f"  {q(a)} -> {q(b)} [color=\"#4c78a8\", style=dashed];")
    lines.append("}")
    return "\n".join(lines)


def _human(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TB"


def render_svg(plan: FusionPlan, path: str) -> None:
    import shutil
    import subprocess

    from .errors import TunerError
    from .package import atomic_write

    dot = shutil.which("dot")
    if not dot:
        raise TunerError("--svg needs Graphviz's `dot`", "install it: apt-get install graphviz (scripts/setup.sh does)")
    svg = subprocess.run([dot, "-Tsvg"], input=to_dot(plan).encode(), capture_output=True, check=True).stdout

    def write(tmp):
        with open(tmp, "wb") as f:
            f.write(svg)

    atomic_write(path, write)
