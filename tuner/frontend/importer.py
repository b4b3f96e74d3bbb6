"""ONNX -> Relax import that keeps provenance.

TVM's importer drops ONNX node names. Our subclass emits each node's result as a binding named after the node,
and records, for every binding emitted while converting a node, which node it came from. Pass pipelines keep
binding names (LegalizeOps rewrites values, FuseOps moves bindings into groups), so every fused kernel can be
traced back to the ONNX nodes inside it. A conversion failure is reported with the node that caused it.
"""

from __future__ import annotations

import contextlib
import io
import re
import warnings
from dataclasses import dataclass, field

import onnx

from tuner.core.errors import NodeRefusal, TunerError, UnsupportedModelError, summarize_native_error
from tuner.core.native_log import quiet_native_stderr
from tuner.core.shapes import is_ranged
from tuner.frontend.checks import iter_nodes, node_label
from tuner.frontend.converters.recurrent import sequence_kernels
from tuner.frontend.onnx_model import PreparedModel


@dataclass
class OnnxNodeRef:
    name: str
    op_type: str

    def to_json(self):
        return {"name": self.name, "op": self.op_type}


@dataclass
class Provenance:
    """Relax binding name -> ONNX node it was converted from."""

    by_var: dict[str, OnnxNodeRef] = field(default_factory=dict)
    nodes: list[OnnxNodeRef] = field(default_factory=list)  # in graph order


def supported_ops() -> set[str]:
    from tvm.relax.frontend.onnx import onnx_frontend

    from tuner.frontend.converters import CONVERTERS

    return set(onnx_frontend._get_convert_map()) | {"If", "Constant"} | set(CONVERTERS)


def unsupported_nodes(model: onnx.ModelProto) -> dict[str, list[str]]:
    """op -> names of the nodes (subgraphs included) that TVM's ONNX frontend has no converter for."""
    known = supported_ops()
    missing: dict[str, list[str]] = {}
    for i, (node, prefix) in enumerate(iter_nodes(model.graph)):
        op = node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}.{node.op_type}"
        if node.op_type not in known or node.domain not in ("", "ai.onnx"):
            missing.setdefault(op, []).append(prefix + node_label(node, i))
    return missing


def _sanitize(name: str) -> str:
    s = re.sub(r"[^0-9A-Za-z_]", "_", name).strip("_")
    return s if s and not s[0].isdigit() else f"n_{s}"


def _stand_in(importer, node) -> bool:
    """Zeros of a rejected node's output shapes in its place (collect mode); False when a shape is unknown."""
    import numpy as np
    from tvm import relax

    known = [importer.static_shapes.get(o) for o in node.output]
    if not node.output or any(k is None for k in known):
        return False
    for name, (shape, dtype) in zip(node.output, known):
        importer._nodes[name] = relax.const(np.zeros(shape, dtype))
    return True


def _node_failed(importer, node, ref, err) -> None:
    """A node's conversion failed: in collect mode, record it and stand in zeros where possible; otherwise raise
    an error that names the node."""
    refused = isinstance(err, NodeRefusal)  # one of our converters says why it will not build this
    msg = str(err) if refused else summarize_native_error(err)
    if importer.collect is not None:
        name = ref.name if isinstance(ref.name, str) else bytes(ref.name).decode("utf-8", "replace")
        importer.collect.append((str(node.op_type), name, msg))
        if _stand_in(importer, node):
            return
    raise UnsupportedModelError(
        f"{node.op_type} node {ref.name!r}: {msg}"
        if refused
        else f"TVM's ONNX frontend cannot convert {node.op_type} node {ref.name!r}: {msg}",
        hint=err.hint if refused else _hint_for(node.op_type, msg),
    ) from err


def _c_identifier(name):
    """TVM's sanitizer keeps "/" and other characters C does not take: an input named "gpu_0/data_0" became the
    kernel parameter `gpu_0/data_0_ptr` and nvcc refused the whole CUDA library."""
    return re.sub(r"[^0-9A-Za-z_.]", "_", name) if name else name


def _without_our_ops(graph):
    """The graph's nodes that TVM must convert itself (unsupported_nodes() has already named anything neither
    TVM nor our converters take)."""
    from tuner.frontend.converters import CONVERTERS

    trimmed = onnx.GraphProto()
    trimmed.node.extend(n for n in graph.node if n.op_type not in CONVERTERS)
    return trimmed


def _make_importer_class():
    from tvm import relax
    from tvm.relax.frontend.onnx.onnx_frontend import ONNXGraphImporter

    class NamingBlockBuilder(relax.BlockBuilder):
        """Names every binding a converter emits after the ONNX node being converted."""

        importer = None

        def emit(self, expr, name_hint=""):
            ref = self.importer.current_node if self.importer else None
            var = super().emit(expr, name_hint or (_sanitize(ref.name) if ref else ""))
            if ref is not None:
                self.importer.provenance.by_var[var.name] = ref
            return var

    class ProvenanceImporter(ONNXGraphImporter):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.bb = NamingBlockBuilder()
            self.bb.importer = self
            self.provenance = Provenance()
            self.current_node: OnnxNodeRef | None = None
            self._marks: list[tuple[OnnxNodeRef, str]] = []  # (node, name of its last binding)
            self._index = 0
            # `conversion_errors` mode: a node that fails is recorded and stood in for by zeros of its output
            # shapes (tensor name -> (shape, dtype) from shape inference), so the nodes after it are tried too
            self.collect: list | None = None
            self.static_shapes: dict = {}

        def _sanitize_name(self, name):
            return super()._sanitize_name(_c_identifier(name))

        def _parse_graph_initializers(self, graph):
            if not self._keep_params_in_input:
                return super()._parse_graph_initializers(graph)
            return _parse_matmul_params(self, graph)

        def _check_for_unsupported_ops(self, graph):
            return super()._check_for_unsupported_ops(_without_our_ops(graph))

        def _construct_nodes(self, graph):
            # Wrap each node so failures name it: iterate one node at a time through the base method.
            for node in graph.node:
                ref = OnnxNodeRef(node_label(node, self._index), node.op_type)
                self._index += 1
                self.current_node = ref
                self.provenance.nodes.append(ref)
                single = onnx.GraphProto()
                single.node.append(node)
                try:
                    super()._construct_nodes(single)
                except TunerError:
                    raise
                except Exception as err:
                    _node_failed(self, node, ref, err)  # returns only where a stand-in took the node's place

        def _convert_operator(self, op_name, inputs, attrs, opset):
            from tuner.frontend.converters import CONVERTERS, OPSET

            sym = _clip_as_op(inputs, attrs, opset) if op_name == "Clip" else None
            if sym is None and op_name in CONVERTERS:
                sym = CONVERTERS[op_name](self.bb, inputs, {**attrs, OPSET: opset})
            if sym is None:
                sym = super()._convert_operator(op_name, inputs, attrs, opset)
            ref = self.current_node
            if ref is not None and isinstance(sym, relax.Call):
                # Bind the node's result (and any nested calls) under its own name, so it is traceable after
                # every pass; otherwise the normaliser names nested calls "lv", as passes name theirs.
                sym = self._emit_named(sym, _sanitize(ref.name), ref)
            return sym

        def _emit_named(self, expr, name, ref):
            return _emit_named(self, expr, name, ref)

    return ProvenanceImporter


def _parse_matmul_params(importer, graph):
    """With weights kept as parameters, keep only MatMul/Gemm weights and biases (what CombineParallelMatmul
    needs). A parameter where the importer needs a value (a ConstantOfShape shape, a Reshape target) changes what
    it emits and fails once bound back (light_squeezenet); names that sanitise alike (light_bvlc_alexnet) would
    overwrite each other."""
    from tvm import relax

    # MatMul/Gemm weights, and the biases added to their outputs (CombineParallelMatmul merges both)
    weights = {i for n in graph.node if n.op_type in ("MatMul", "Gemm") for i in n.input[1:]}
    mm_out = {o for n in graph.node if n.op_type in ("MatMul", "Gemm") for o in n.output}
    weights |= {i for n in graph.node if n.op_type == "Add" and set(n.input) & mm_out for i in n.input}
    for init in graph.initializer:
        array = importer._parse_array(init)
        if init.name in weights and "float" in str(array.dtype) and len(array.shape) >= 1:
            name = init.name.removeprefix("onnx::")
            if name in importer._params:  # two initializers sanitising to one name: keep both
                name = f"{name}_{len(importer._params)}"
            var = importer._new_var(name, shape=array.shape, dtype=array.dtype)
            importer._nodes[init.name] = var
            importer._params[name] = (var, array)
        else:
            importer._nodes[init.name] = relax.const(array)


def _emit_named(importer, expr, name, ref):
    """Bind a call and its nested calls under the node's name, recording their provenance."""
    from tvm import relax

    if isinstance(expr, relax.Call) and not isinstance(expr.op, relax.GlobalVar):
        args = [_emit_named(importer, a, name, ref) if isinstance(a, relax.Call) else a for a in expr.args]
        if any(a is not b for a, b in zip(args, expr.args)):
            expr = relax.Call(expr.op, args, expr.attrs, expr.ty_args)
        var = importer.bb.emit(expr, name_hint=name)
        importer.provenance.by_var[var.name] = ref
        return var
    return expr


def _clip_as_op(inputs, attrs, opset):
    """Clip with constant bounds as Relax's maximum/minimum against scalar constants. TVM's converter emits them as
    TIR calls (call_te), which graph passes cannot see into: ToMixedPrecision fails on them once their input is
    fp16 (PP-OCR with --dtype float16), and so does Relax's `clip` op (its bounds are not tensors).
    min(max(x, lo), hi) is ONNX's own definition, lo > hi included. None (the converter handles it) for
    non-float inputs, bounds that are not constants, NaN bounds and a Clip without bounds."""
    import numpy as np
    import tvm
    from tvm import relax

    dtype = str(getattr(inputs[0].ty, "dtype", ""))
    if not dtype.startswith(("float", "bfloat")):
        return None
    if opset < 11:
        bounds = [attrs.get("min"), attrs.get("max")]
    else:
        bounds = []
        for b in (list(inputs) + [None, None])[1:3]:
            if b is None:
                bounds.append(None)
            elif isinstance(b, tvm.ir.expr.Constant) and b.value.numpy().size == 1:
                bounds.append(float(b.value.numpy().reshape(())))
            else:
                return None
    if all(b is None or np.isinf(b) for b in bounds) or any(b is not None and np.isnan(b) for b in bounds):
        return None
    lo, hi = bounds
    out = inputs[0]
    if lo is not None and not np.isinf(lo):
        out = relax.op.maximum(out, relax.const(lo, dtype))
    if hi is not None and not np.isinf(hi):
        out = relax.op.minimum(out, relax.const(hi, dtype))
    return out


def _hint_for(op: str, msg: str) -> str:
    if "Shape" in msg or "dynamic" in msg.lower() or "ShapeExpr" in msg:
        return "bind every input with --input-shape so shape subgraphs can be folded (onnxsim runs automatically)"
    if op == "If":
        return "freeze the input the branch depends on with --const NAME=VALUE"
    return "this op or attribute combination is not implemented in TVM 0.27's Relax ONNX frontend"


def import_to_relax(prepared: PreparedModel, keep_params: bool = False, sequence_lanes: int | None = None):
    """Import with provenance. Returns (IRModule, params dict or None, Provenance). `sequence_lanes` (a CPU
    target's fp32 vector lanes): recurrent ops become one sequence kernel each where they can, not unrolled."""
    import tvm  # noqa: F401

    missing = unsupported_nodes(prepared.model)
    if missing:
        listing = "; ".join(
            f"{op} ({len(n)}: {', '.join(n[:5])}{', ...' if len(n) > 5 else ''})" for op, n in missing.items()
        )
        raise UnsupportedModelError(
            f"{prepared.path}: ops TVM's ONNX frontend cannot convert: {listing}",
            hint="run `fusion-tuner check` for the full list",
        )
    from tuner.frontend.checks import attribute_problems

    bad = attribute_problems(prepared.model)
    if bad:
        first = bad[0]
        raise UnsupportedModelError(
            f"{prepared.path}: {first['op']} node {first['nodes'][0]!r}: {first['reason']}"
            + (f" (+{len(bad) - 1} more)" if len(bad) > 1 else ""),
            hint="fix the exported attributes; `fusion-tuner check` lists every node",
        )
    importer_cls = _make_importer_class()
    dtypes = {i.name: i.dtype for i in prepared.inputs}
    # a ranged input keeps the symbolic dimensions preparation named in the graph (tuner/core/shapes.py)
    pinned = {k: v for k, v in prepared.shapes.items() if not is_ranged(v)}
    importer = importer_cls(pinned, dtypes, keep_params_in_input=keep_params, sanitize=True)
    # The importer prints "Error converting operator ..." on failures, and TVM's C++ side a "BlockBuilder
    # destroyed" warning per unwound block; our error says it better.
    failure = None
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), quiet_native_stderr():
        warnings.simplefilter("ignore")
        try:
            with sequence_kernels(sequence_lanes):
                mod = importer.from_onnx(prepared.model.graph, _opset(prepared.model))
        except TunerError as err:
            # the tracebacks hold the importer's BlockBuilder: drop them here, where its warning is silenced
            failure = type(err)(err.message, hint=err.hint)
            del err
            importer = None
    if failure is not None:
        raise failure
    _assign_unnamed_bindings(mod, importer.provenance)
    bounds = prepared.dim_bounds()
    if bounds:  # memory planning sizes each intermediate for the top of the ranges, once per VM
        main = mod["main"].with_attr("tir_var_upper_bound", {k: hi for k, (_, hi) in bounds.items()})
        mod["main"] = main.with_attr("tir_var_lower_bound", {k: lo for k, (lo, _) in bounds.items()})
    return mod, importer.provenance


def _opset(model):
    from tuner.frontend.onnx_model import default_opset

    return default_opset(model)


def _assign_unnamed_bindings(mod, prov: Provenance) -> None:
    """Bindings emitted inside a converter (helper reshapes, ...) belong to the node whose result follows."""
    pending: list[str] = []
    for block in mod["main"].body.blocks:
        for binding in block.bindings:
            name = binding.var.name
            if name in prov.by_var:
                for p in pending:
                    prov.by_var.setdefault(p, prov.by_var[name])
                pending = []
            else:
                pending.append(name)
