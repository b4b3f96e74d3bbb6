"""A built package's kernels attributed to ONNX nodes, and ONNX Runtime's per-node times to those kernels: where
the package loses time to ONNX Runtime, kernel by kernel.

The package keeps TVM's kernel names; the plan knows each kernel's ONNX nodes. Both come from the same lowering,
and the VM calls kernels in the order of the plan's launched groups, so the two sequences are aligned in order,
by base name (TVM numbers names apart and marks packed kernels `_prepacked`); a plan kernel the build folded away
(a kernel on constants only) is skipped. ONNX Runtime names its nodes after the ONNX nodes, or after the output
tensor of a node it rewrote (its NCHWc convs: `stem/relu_out_nchwc`), with suffixes (`_nchwc`, `:0`); nodes it
adds (layout reorders) belong to no kernel and are listed apart.
"""

from __future__ import annotations

import re

from tuner.core.ir import PACKED
from tuner.plan import reasons
from tuner.plan.model import FusionPlan

_ORT_SUFFIX = re.compile(r"(:\d+)?(_nchwc)?$")
# a node ONNX Runtime made by fusing others is named after the first: "/model.0/act/Mul/QuickGeluFusion/"
_ORT_FUSION = re.compile(r"/\w*Fusion\w*/?$")


def base_name(kernel: str) -> str:
    """ "fused_conv2d_strided_slice11_prepacked" and "fused_conv2d_strided_slice1" -> "fused_conv2d_strided_slice"."""
    return reasons.base_name(reasons.base_name(kernel).removesuffix(PACKED))


def kernel_groups(calls: list[str], plan: FusionPlan) -> dict[str, list]:
    """{kernel symbol: the plan's groups it runs} for the kernels in `calls` (one inference's call sequence,
    built-ins included); a kernel called at several sites gets the group of each. Kernels not found in the plan's
    order are left out."""
    groups = [g for g in plan.groups if g.launched]
    out: dict[str, list] = {}
    k = 0
    for symbol in calls:
        if symbol.startswith("vm.builtin.") or k >= len(groups):
            continue
        j = next((i for i in range(k, len(groups)) if base_name(groups[i].name) == base_name(symbol)), None)
        if j is None:
            continue
        out.setdefault(symbol, []).append(groups[j])
        k = j + 1
    return out


def ops_label(groups: list, width: int = 36) -> str:
    """A kernel as its ONNX ops in order ("Conv+Add+Relu"), cut to `width`. A transpose our layout pass put in
    front of a conv reads "layout Transpose (Conv)"."""
    if is_layout_transpose(groups):
        return f"layout Transpose ({groups[0].members[0].onnx_op or '?'})"
    ops = []
    for g in groups:
        for m in g.members:
            for op in [m.onnx_op] + [o for _, o in m.merged]:
                if op and (not ops or ops[-1] != op):
                    ops.append(op)
    text = "+".join(ops) or (groups[0].name if groups else "?")
    return text if len(text) <= width else text[: width - 1] + "…"


def is_layout_transpose(groups: list) -> bool:
    """A kernel that only transposes for our layout pass (it carries the ONNX node of the conv it serves)."""
    members = [m for g in groups for m in g.members]
    return bool(members) and all(m.primfunc.startswith("transpose") and m.onnx_op != "Transpose" for m in members)


def in_ownership_order(groups: dict[str, list], kernel_ms: dict[str, float]) -> list[tuple[str, list]]:
    """`groups`' items in the order that gives a node held by several kernels to the right one, given last: a
    conv's node to the conv rather than the layout transposes around it; else to the kernel that takes longest
    (a Gemm's node to its matmul, not to the residual add its bias was fused into)."""
    return sorted(groups.items(), key=lambda kv: (not is_layout_transpose(kv[1]), kernel_ms.get(kv[0], 0.0)))


def node_label(names: list[str], width: int = 40) -> str:
    """The first ONNX node, its end kept when the name is long (exporters put the distinctive part last)."""
    if not names:
        return "—"
    first = names[0] if len(names[0]) <= width else "…" + names[0][-(width - 1) :]
    return first + (f" +{len(names) - 1}" if len(names) > 1 else "")


def nodes_of(groups: list) -> list[str]:
    seen: list[str] = []
    for g in groups:
        seen += [n for n in g.onnx_nodes if n not in seen]
    return seen


def onnxruntime_by_kernel(
    nodes_by_kernel: dict[str, list[str]], ort_rows: list[dict], producer: dict[str, list[str]] | None = None
) -> tuple[dict[str, float], list]:
    """({kernel: ONNX Runtime ms of the same ONNX nodes}, ONNX Runtime rows that match no kernel). `producer` maps
    tensor names to the ONNX node that outputs them, then the node before it (tried in order). A node in several
    kernels goes to the last one given."""
    owner = {node: kernel for kernel, nodes in nodes_by_kernel.items() for node in nodes}
    producer = producer or {}
    per_kernel: dict[str, float] = {}
    unmatched = []
    for row in ort_rows:
        name = _ORT_SUFFIX.sub("", row["name"])
        kernel = owner.get(row["name"]) or owner.get(name) or owner.get(_ORT_FUSION.sub("", name))
        kernel = kernel or next((owner[n] for n in producer.get(name, []) if n in owner), None)
        if kernel is None:
            unmatched.append(row)
        else:
            per_kernel[kernel] = per_kernel.get(kernel, 0.0) + row["ms"]
    return per_kernel, unmatched


def fused_nodes_by_kernel(nodes_by_kernel: dict[str, list[str]], rows: list[dict]) -> tuple[dict[str, float], list]:
    """({kernel: ms}, rows that match no kernel) for a runtime whose profile rows name the model's nodes each of
    its nodes fused (`sources`, OpenVINO's originalLayersNames): a row goes to the kernel holding the first of its
    sources that any kernel holds."""
    owner = {node: kernel for kernel, nodes in nodes_by_kernel.items() for node in nodes}
    per_kernel: dict[str, float] = {}
    unmatched = []
    for row in rows:
        kernel = next((owner[s] for s in row["sources"] if s in owner), None)
        if kernel is None:
            unmatched.append(row)
        else:
            per_kernel[kernel] = per_kernel.get(kernel, 0.0) + row["ms"]
    return per_kernel, unmatched
