"""What onnx.checker accepts but nothing can be built from, found by the mutation fuzzer (devtools/fuzz.py):
models without outputs, opsets no onnx release defines, inputs that cannot be fed, initializers whose data does
not match their dims, names that are not UTF-8, and windowed ops whose attributes TVM would turn into nonsense
shapes. `check` and `compile` share these, so check's verdict is compile's."""

from __future__ import annotations

import numpy as np
import onnx

from tuner.core.errors import TunerError, UnsupportedModelError


def node_label(node: onnx.NodeProto, index: int) -> str:
    return node.name or f"{node.op_type}_{index}"


def iter_nodes(graph: onnx.GraphProto, prefix: str = ""):
    """All nodes, including those inside If/Loop/Scan bodies; yields (node, path of enclosing graphs)."""
    for node in graph.node:
        yield node, prefix
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from iter_nodes(attr.g, f"{prefix}{node.name or node.op_type}/{attr.name}/")
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for i, g in enumerate(attr.graphs):
                    yield from iter_nodes(g, f"{prefix}{node.name or node.op_type}/{attr.name}[{i}]/")


def _graphs(graph: onnx.GraphProto):
    """The graph and every If/Loop/Scan body inside it."""
    yield graph
    for node, _ in iter_nodes(graph):
        for a in node.attribute:
            yield from [a.g] if a.type == onnx.AttributeProto.GRAPH else a.graphs


MIN_OPSET = 7  # numpy-style broadcasting; ONNX Runtime's oldest supported opset


def default_opset(model: onnx.ModelProto) -> int:
    for op in model.opset_import:
        if op.domain in ("", "ai.onnx"):
            return op.version
    return 1


def run_checker(model: onnx.ModelProto, path: str) -> None:
    try:
        onnx.checker.check_model(model)
    except onnx.checker.ValidationError as err:
        first = str(err).strip().splitlines()[0]
        raise TunerError(
            f"{path}: fails onnx.checker: {first}", "fix the exporter or the graph; TVM cannot import an invalid model"
        ) from err
    except UnicodeDecodeError as err:  # the checker decodes names as UTF-8 in its messages
        raise TunerError(
            f"{path}: a node, tensor or attribute name is not valid UTF-8 (byte {err.start})",
            "the file is damaged; re-export it",
        ) from err


# element types a model's inputs may have: the numeric ones TVM builds and numpy can feed
INPUT_DTYPES = {
    onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE, onnx.TensorProto.BFLOAT16,
    onnx.TensorProto.INT8, onnx.TensorProto.INT16, onnx.TensorProto.INT32, onnx.TensorProto.INT64,
    onnx.TensorProto.UINT8, onnx.TensorProto.UINT16, onnx.TensorProto.UINT32, onnx.TensorProto.UINT64,
    onnx.TensorProto.BOOL,
}  # fmt: skip
MAX_INPUT_DIM = 2**31 - 1
# element types TVM 0.27 cannot compute with ONNX's semantics anywhere in a graph: float8 (its casts neither
# round nor saturate as ONNX specifies: every conformance case with them came out wrong), sub-byte integers and
# floats (packed storage TVM does not lay out), strings and complex numbers. Refused by name, up front.
UNBUILDABLE_DTYPES = {
    code
    for name, code in onnx.TensorProto.DataType.items()
    if name.startswith(("FLOAT8", "FLOAT4", "INT4", "UINT4", "INT2", "UINT2", "STRING", "COMPLEX"))
}
_TYPE_ATTRS = ("to", "output_dtype", "dtype")  # Cast/EyeLike/RandomX `dtype`, QuantizeLinear `output_dtype`


def _check_tensor_size(t: onnx.TensorProto, path: str) -> None:
    """An initializer holds as many elements as its dims say (the checker does not look; numpy would raise)."""
    if t.data_location == onnx.TensorProto.EXTERNAL or t.data_type in (
        onnx.TensorProto.STRING,
        onnx.TensorProto.UNDEFINED,
    ):
        return
    want = 1
    for d in t.dims:
        if d < 0:
            raise TunerError(f"{path}: initializer {t.name!r} has dimension {d}", "the file is damaged; re-export it")
        want *= d
    if t.raw_data:
        try:
            itemsize = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(t.data_type)).itemsize
        except Exception:  # an element type numpy does not know: TVM's importer reports it
            return
        have = len(t.raw_data) / itemsize
    else:
        field = onnx.helper.tensor_dtype_to_field(t.data_type) if t.data_type in _FIELD_TYPES else None
        if field is None:
            return
        have = len(getattr(t, field))
        if t.data_type in (onnx.TensorProto.COMPLEX64, onnx.TensorProto.COMPLEX128):
            have /= 2
    if have != want and not (have == 0 and want == 0):
        raise TunerError(
            f"{path}: initializer {t.name!r} holds {have:g} elements, its dims {list(t.dims)} say {want}",
            "the file is damaged; re-export it",
        )


_FIELD_TYPES = {
    onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.INT32, onnx.TensorProto.INT64,
    onnx.TensorProto.UINT64, onnx.TensorProto.INT8, onnx.TensorProto.UINT8, onnx.TensorProto.INT16,
    onnx.TensorProto.UINT16, onnx.TensorProto.BOOL, onnx.TensorProto.FLOAT16,
}  # fmt: skip


def _check_types(model: onnx.ModelProto, path: str) -> None:
    """Element types every node accepts (a Conv on int64, float weights on a float16 input): ONNX's type check,
    which the plain checker skips. Only type errors count; shape inference may legitimately give up elsewhere."""
    try:
        onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True)
    except onnx.shape_inference.InferenceError as err:
        msg = str(err).strip().splitlines()[0]
        if "type" in msg.lower() and any(k in msg for k in ("unsupported type", "inconsistent type", "different type")):
            raise TunerError(
                f"{path}: {msg.replace('[ShapeInferenceError] ', '')}",
                "the node's inputs have element types its ONNX schema does not allow; fix the export",
            ) from None
    except Exception:  # anything else is shape inference's own limit, not the model's fault
        pass


def check_opset(model: onnx.ModelProto, path: str) -> None:
    """An opset this onnx defines and ONNX Runtime loads; checked before onnx.checker, whose complaints about an
    old opset ("Required attribute 'consumed_inputs' is missing") do not say what is wrong."""
    opset, newest = default_opset(model), onnx.defs.onnx_opset_version()
    if opset > newest:
        raise TunerError(
            f"{path}: opset {opset} is newer than any this onnx {onnx.__version__} knows (up to {newest})",
            "export with a released opset",
        )
    declared = any(op.domain in ("", "ai.onnx") for op in model.opset_import)
    if declared and opset < MIN_OPSET:
        raise UnsupportedModelError(
            f"{path}: opset {opset} predates ONNX's numpy-style broadcasting (opset {MIN_OPSET}); its Add/Mul/Gemm "
            "semantics differ, and ONNX Runtime, the reference every build is verified against, loads opset "
            f"{MIN_OPSET} and newer only",
            hint="convert it first: onnx.version_converter.convert_version(onnx.load(path), 13)",
        )


def check_meaningful(model: onnx.ModelProto, path: str) -> None:
    """What the checker accepts but nothing can be built from: no outputs, an opset no onnx release defines,
    inputs of element types we cannot feed or dimensions no tensor can have."""
    if not model.graph.output:
        raise TunerError(f"{path}: the graph has no outputs; a model without outputs computes nothing")
    for t in model.graph.initializer:
        _check_tensor_size(t, path)
    inits = {t.name for t in model.graph.initializer}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        if not vi.type.HasField("tensor_type") or tt.elem_type not in INPUT_DTYPES:
            kind = "non-tensor" if not vi.type.HasField("tensor_type") else _type_name(tt.elem_type)
            raise UnsupportedModelError(
                f"{path}: input {vi.name!r} has element type {kind}; "
                "fusion-tuner builds models whose inputs are numeric tensors",
                hint="export the model with float, integer or bool inputs",
            )
        for d in tt.shape.dim:
            if d.HasField("dim_value") and not 0 <= d.dim_value <= MAX_INPUT_DIM:
                raise TunerError(
                    f"{path}: input {vi.name!r} has dimension {d.dim_value}; dimensions are 0 to {MAX_INPUT_DIM}",
                    "fix the exported shape, or bind it with --input-shape",
                )
    check_element_types(model.graph, path)
    check_inference_mode(model.graph, path)
    check_no_sequences(model.graph, path)
    _check_types(model, path)  # last: the input checks above name the input, this names the node


def _type_name(code: int) -> str:
    known = code in onnx.TensorProto.DataType.values()
    return onnx.TensorProto.DataType.Name(code) if known else f"{code} (unknown)"


def check_inference_mode(graph: onnx.GraphProto, path: str) -> None:
    """A BatchNormalization in training mode normalises by the batch's own statistics and updates the running
    ones: a training graph, which TVM's converter would run as inference (wrong outputs, no error)."""
    for i, (node, prefix) in enumerate(iter_nodes(graph)):
        if node.op_type == "BatchNormalization" and any(a.name == "training_mode" and a.i for a in node.attribute):
            raise UnsupportedModelError(
                f"{path}: node {prefix}{node_label(node, i)!r} (BatchNormalization) has training_mode=1",
                hint="export the model for inference (model.eval() before torch.onnx.export)",
            )


SEQUENCE_OPS = {
    "SequenceConstruct", "SequenceEmpty", "SequenceInsert", "SequenceAt", "SequenceErase", "SequenceLength",
    "SequenceMap", "SplitToSequence", "ConcatFromSequence",
}  # fmt: skip


def check_no_sequences(graph: onnx.GraphProto, path: str) -> None:
    """Tensor sequences (subgraphs too): TVM 0.27's importer crashed the process on Loop over sequences,
    SequenceInsert and SequenceMap, and miscomputed SplitToSequence (every ONNX backend case with them failed)."""
    for i, (node, prefix) in enumerate(iter_nodes(graph)):
        if node.op_type in SEQUENCE_OPS:
            raise UnsupportedModelError(
                f"{path}: node {prefix}{node_label(node, i)!r} ({node.op_type}) works on a tensor sequence; "
                "fusion-tuner builds graphs of tensors",
                hint="export the model without sequence ops (a fixed number of tensors), or run it with ONNX Runtime",
            )


def check_element_types(graph: onnx.GraphProto, path: str) -> None:
    """Refuse (as unsupported, naming the tensor or node) every element type of UNBUILDABLE_DTYPES the graph
    declares: the type a node casts or quantizes to and the tensors of Constant nodes first (they say most),
    then outputs, initializers and annotated values; subgraphs too."""
    declared = []  # (where, element type)
    for i, (node, prefix) in enumerate(iter_nodes(graph)):
        where = f"node {prefix}{node_label(node, i)!r} ({node.op_type})"
        for a in node.attribute:
            if a.name in _TYPE_ATTRS and a.type == onnx.AttributeProto.INT:
                declared.append((f"{where}, attribute {a.name}", a.i))
            elif a.type == onnx.AttributeProto.TENSOR:
                declared.append((where, a.t.data_type))
    for g in _graphs(graph):
        declared += [(f"initializer {t.name!r}", t.data_type) for t in g.initializer]
        declared += [(f"{kind} {v.name!r}", v.type.tensor_type.elem_type) for kind, vs in
                     (("output", g.output), ("value", g.value_info)) for v in vs]  # fmt: skip
    for where, code in declared:
        if code in UNBUILDABLE_DTYPES:
            raise UnsupportedModelError(
                f"{path}: {where} has element type {_type_name(code)}; TVM 0.27 cannot compute float8, 4-bit, "
                "string or complex tensors with ONNX's semantics",
                hint="keep this part of the model in float32/float16/int8, or run it with ONNX Runtime",
            )


# ops with a sliding window, and the attributes that must be positive
_WINDOW_OPS = {"Conv", "ConvTranspose", "MaxPool", "AveragePool", "LpPool", "ConvInteger", "QLinearConv"}


def attribute_problems(model: onnx.ModelProto) -> list[dict]:
    """Windowed ops whose attributes TVM would accept and turn into nonsense shapes (found by the fuzzer):
    non-positive strides, dilations or kernels, negative pads, a window larger than its padded input.
    [{op, nodes: [name], reason}]"""
    shapes = _known_shapes(model)
    out = []
    for index, node in enumerate(model.graph.node):
        if node.op_type not in _WINDOW_OPS:
            continue
        attrs = {a.name: list(a.ints) for a in node.attribute if a.type == onnx.AttributeProto.INTS}
        reason = None
        for name in ("strides", "dilations", "kernel_shape"):
            if any(v < 1 for v in attrs.get(name, [])):
                reason = f"{name} {attrs[name]} must be positive"
        if reason is None and any(v < 0 for v in attrs.get("pads", [])):
            reason = f"pads {attrs['pads']} must not be negative"
        x = shapes.get(node.input[0]) if node.input else None
        kernel = attrs.get("kernel_shape")
        if kernel is None and node.op_type == "Conv" and len(node.input) > 1 and shapes.get(node.input[1]):
            kernel = shapes[node.input[1]][2:]
        auto_pad = next((a.s.decode() for a in node.attribute if a.name == "auto_pad"), "NOTSET")
        sized = node.op_type != "ConvTranspose" and auto_pad in ("NOTSET", "VALID")  # SAME pads to fit
        if reason is None and sized and x and kernel and len(x) == len(kernel) + 2:
            pads = attrs.get("pads", [0] * 2 * len(kernel))
            dil = attrs.get("dilations", [1] * len(kernel))
            for i, k in enumerate(kernel):
                if (
                    not isinstance(x[2 + i], int)
                    or x[2 + i] <= 0
                    or len(pads) != 2 * len(kernel)
                    or len(dil) != len(kernel)
                ):
                    continue
                span, have = dil[i] * (k - 1) + 1, x[2 + i] + pads[i] + pads[i + len(kernel)]
                if span > have:
                    reason = (
                        f"window {span} (kernel {k}, dilation {dil[i]}) is larger than its padded input {have} "
                        f"along spatial axis {i}"
                    )
                    break
        if reason:
            out.append({"op": node.op_type, "nodes": [node_label(node, index)], "reason": reason})
    return out


def _known_shapes(model: onnx.ModelProto) -> dict[str, list]:
    """Static shapes by value name: inputs, initializers and whatever shape inference recorded."""
    shapes = {}
    for vi in list(model.graph.input) + list(model.graph.value_info) + list(model.graph.output):
        dims = vi.type.tensor_type.shape.dim
        shapes[vi.name] = [d.dim_value if d.HasField("dim_value") else None for d in dims]
    for t in model.graph.initializer:
        shapes[t.name] = list(t.dims)
    return shapes
