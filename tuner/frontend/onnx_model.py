"""Loading an ONNX file, describing its inputs and outputs, and preparing it for import.

Preparation binds the input shapes, freezes `--const` inputs and, where the graph computes shapes at run time
(Shape -> Gather -> Concat -> Reshape, dynamic Pad), folds those subgraphs with onnxsim so that TVM's Relax
frontend (which wants static shapes there) can import it.
"""

from __future__ import annotations

import collections
import hashlib
import os
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import numpy_helper

from tuner.core.errors import TunerError
from tuner.core.native_log import quiet_native_output
from tuner.core.shapes import DimRange, any_ranged, is_ranged, normalize_shapes, pinned_at
from tuner.frontend.checks import check_meaningful, check_opset, default_opset, iter_nodes, node_label, run_checker  # noqa: F401  (re-exports)
from tuner.frontend.index_ranges import index_ranges
from tuner.frontend.node_names import restore_node_names
from tuner.frontend.shape_binding import bind_shapes, symbolic_dim_names
from tuner.frontend.shape_inputs import needs_shape_folding


@dataclass
class TensorInfo:
    name: str
    shape: list  # ints, or str/None for dynamic dims
    dtype: str

    @property
    def dynamic_dims(self) -> list[int]:
        return [i for i, d in enumerate(self.shape) if not isinstance(d, int)]

    def to_json(self) -> dict:
        return {"name": self.name, "shape": self.shape, "dtype": self.dtype}

    def describe(self) -> str:
        dims = "x".join(str(d) if d is not None else "?" for d in self.shape) if self.shape else "scalar"
        return f"{self.name}: {self.dtype}[{dims}]"


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def load_onnx(path: str) -> onnx.ModelProto:
    """Load and validate with clear errors: missing, not ONNX, truncated, failing the checker, meaningless."""
    import stat

    if not os.path.exists(path):
        raise TunerError(f"{path}: no such file", "give the path of an .onnx model file")
    if os.path.isdir(path):
        raise TunerError(f"{path}: is a directory, not an ONNX file")
    if not stat.S_ISREG(os.stat(path).st_mode):  # a FIFO would block the read forever
        raise TunerError(f"{path}: is not a regular file (a FIFO, device or socket)", "give an .onnx model file")
    try:
        model = onnx.load(path)
    except Exception as err:  # protobuf's DecodeError and friends
        raise TunerError(
            f"{path}: not a readable ONNX model ({type(err).__name__}: {err})",
            "the file may be truncated or not ONNX at all; re-export or re-download it",
        ) from err
    if not model.graph.node and not model.graph.output:
        raise TunerError(f"{path}: parsed as ONNX but holds no graph", "the file is probably not an ONNX model")
    check_opset(model, path)
    run_checker(model, path)
    unknown_dims_as_dynamic(model)
    check_meaningful(model, path)
    return model


def unknown_dims_as_dynamic(model: onnx.ModelProto) -> None:
    """Exporters write an unknown input dimension as -1 (paddle2onnx), "?" or an empty name: each is dynamic here,
    named after its input and axis, so --input-shape binds it like any dim_param. (0 stays a real, empty
    dimension: ONNX Runtime holds inputs to it.)"""
    for vi in model.graph.input:
        if not vi.type.HasField("tensor_type"):
            continue
        for axis, d in enumerate(vi.type.tensor_type.shape.dim):
            if (d.HasField("dim_value") and d.dim_value < 0) or (d.HasField("dim_param") and d.dim_param in ("", "?")):
                d.dim_param = f"{vi.name}_dim{axis}"  # clears dim_value: the two share a oneof


def _dtype_of(elem_type: int) -> str:
    try:
        return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type)).name
    except Exception:
        return onnx.TensorProto.DataType.Name(elem_type).lower()


def _tensor_info(vi: onnx.ValueInfoProto) -> TensorInfo:
    tt = vi.type.tensor_type
    shape = []
    if tt.HasField("shape"):
        for d in tt.shape.dim:
            shape.append(d.dim_value if d.HasField("dim_value") else (d.dim_param or None))
    else:
        shape = None
    return TensorInfo(vi.name, shape if shape is not None else [None], _dtype_of(tt.elem_type))


def graph_inputs(model: onnx.ModelProto) -> list[TensorInfo]:
    """The real inputs: old exporters list initializers as graph inputs too."""
    inits = {t.name for t in model.graph.initializer}
    return [_tensor_info(vi) for vi in model.graph.input if vi.name not in inits]


def graph_outputs(model: onnx.ModelProto) -> list[TensorInfo]:
    return [_tensor_info(vi) for vi in model.graph.output]


def op_histogram(model: onnx.ModelProto) -> dict[str, int]:
    counts = collections.Counter(
        n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}.{n.op_type}" for n, _ in iter_nodes(model.graph)
    )
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


@dataclass
class PreparedModel:
    """An ONNX model with shapes bound and constants frozen, ready for import."""

    path: str
    model: onnx.ModelProto
    sha256: str
    inputs: list[TensorInfo]
    outputs: list[TensorInfo]
    shapes: dict[str, tuple[int, ...]]
    consts: dict[str, float | int | list] = field(default_factory=dict)  # scalars, or values (shape inputs)
    notes: list[str] = field(default_factory=list)  # what preparation changed, for `check`
    folded: dict[str, int] = field(default_factory=dict)  # op -> nodes removed by folding
    precision: str = "float32"  # compute precision the import applies (tuner.transform.precision)
    index_ranges: dict = field(default_factory=dict)  # input -> IndexRange (frontend/index_ranges.py)
    subnormal_weights: dict = field(default_factory=dict)  # tensor -> values flushed to zero

    @property
    def name(self) -> str:
        return os.path.splitext(os.path.basename(self.path))[0]

    @property
    def ranged(self) -> bool:
        return any_ranged(self.shapes)

    def dim_bounds(self) -> dict[str, tuple[int, int]]:
        """{symbolic dimension: (lo, hi)} of the ranged inputs."""
        names = symbolic_dim_names({i.name: i for i in self.inputs}, self.shapes)
        out = {}
        for name, row in names.items():
            for d, dim_name in zip(self.shapes[name], row):
                if dim_name is not None:
                    out[dim_name] = (d.lo, d.hi)
        return out

    def input_specs(self) -> list[dict]:
        """The inputs as the package's manifest describes them: name, shape, dtype; for a ranged input the range of
        each dimension and the names that tie dimensions of several inputs together (`shape` is then the middle
        of the ranges; a package makes it its first tune shape, the shape generated inputs take); for an input
        that indexes a tensor its valid range (checked at every call)."""
        specs = []
        names = symbolic_dim_names({i.name: i for i in self.inputs}, self.shapes)
        for i in self.inputs:
            shape = self.shapes[i.name]
            spec = {"name": i.name, "shape": list(pinned_at({0: shape}, lambda r: r.mid)[0]), "dtype": i.dtype}
            if is_ranged(shape):
                spec.update(shape_range=[[d.lo, d.hi] if isinstance(d, DimRange) else [d, d] for d in shape])
                spec.update(dim_names=names[i.name])
            if i.name in self.index_ranges:
                spec.update(self.index_ranges[i.name].to_json())
            specs.append(spec)
        return specs


def _freeze_consts(model: onnx.ModelProto, consts: dict, path: str) -> list[str]:
    notes = []
    by_name = {i.name: i for i in graph_inputs(model)}
    for name, value in consts.items():
        if name not in by_name:
            raise TunerError(
                f"--const {name}: {path} has no input named {name!r}", f"inputs are: {', '.join(by_name) or '(none)'}"
            )
        arr = _const_array(by_name[name], value)
        vi = next(v for v in model.graph.input if v.name == name)
        model.graph.input.remove(vi)
        model.graph.initializer.append(numpy_helper.from_array(arr, name))
        notes.append(f"input {name} frozen to constant {value}")
    return notes


def _const_array(info: TensorInfo, value) -> np.ndarray:
    """The constant for input `info`: a scalar fills its (size-1) shape; values (a list or array) must match its
    static dims, as a shape, axes or pads input does."""
    if np.ndim(value) == 0:
        shape = [d if isinstance(d, int) else 1 for d in info.shape] if info.shape != [None] else []
        if int(np.prod(shape)) != 1:
            raise TunerError(
                f"--const {info.name}: input {info.describe()} is not a scalar",
                "give one value per element: NAME=1,2,3",
            )
        return np.full(shape, value, dtype=np.dtype(info.dtype))
    arr = np.asarray(value, dtype=np.dtype(info.dtype))
    fits = info.shape == [None] or (
        len(info.shape) == arr.ndim and all(not isinstance(d, int) or d == n for d, n in zip(info.shape, arr.shape))
    )
    if not fits:
        got = arr.shape[0] if arr.ndim == 1 else arr.shape
        raise TunerError(f"--const {info.name}: {got} values do not fit input {info.describe()}")
    return arr


def _simplify(model: onnx.ModelProto, shapes: dict, path: str) -> onnx.ModelProto:
    import onnxsim  # heavy; only when folding is needed

    try:
        with quiet_native_output():
            return _simplify_checked(onnxsim, model, shapes, path)
    except TunerError:
        raise


def _simplify_checked(onnxsim, model, shapes, path):
    try:
        # skip_fuse_bn: keep BatchNorm visible so our own fusion (and the compare report) decide about it.
        simplified, ok = onnxsim.simplify(
            model,
            overwrite_input_shapes={k: list(v) for k, v in shapes.items() if not is_ranged(v)},
            skip_fuse_bn=True,
        )
    except Exception as err:
        raise TunerError(
            f"{path}: folding shape subgraphs with onnxsim failed: {err}",
            "check that --input-shape matches what the model expects",
        ) from err
    if not ok:
        raise TunerError(f"{path}: onnxsim could not verify the simplified graph")
    return simplified


_CONSTANT_FORMS = {"value_float": np.float32, "value_floats": np.float32, "value_int": np.int64, "value_ints": np.int64}


def constants_as_tensors(model: onnx.ModelProto) -> int:
    """Rewrite Constant nodes written with value_float(s)/value_int(s) (opset 12+) into the `value` tensor form,
    the only one TVM's importer reads ("no value in Constant"). Returns how many were rewritten."""
    count = 0
    for node, _ in iter_nodes(model.graph):
        if node.op_type != "Constant" or len(node.attribute) != 1 or node.attribute[0].name not in _CONSTANT_FORMS:
            continue
        attr = node.attribute[0]
        value = onnx.helper.get_attribute_value(attr)
        tensor = numpy_helper.from_array(np.asarray(value, dtype=_CONSTANT_FORMS[attr.name]), name=node.output[0])
        del node.attribute[:]
        node.attribute.append(onnx.helper.make_attribute("value", tensor))
        count += 1
    return count


def _rewrite(model: onnx.ModelProto, notes: list[str], flush_subnormals: bool) -> dict[str, int]:
    """The ONNX-level rewrites (frontend/onnx_rewrites.py), each said in `notes`; returns the subnormal weights
    flushed per tensor."""
    from tuner.frontend.onnx_rewrites import conv_transposes_as_convs, flush_subnormal_weights, fold_batch_norms

    subnormal = flush_subnormal_weights(model) if flush_subnormals else {}
    if subnormal:
        top = sorted(subnormal.items(), key=lambda kv: -kv[1])
        names = ", ".join(f"{k} ({v:,})" for k, v in top[:3]) + (f" (+{len(top) - 3} more)" if len(top) > 3 else "")
        notes.append(f"{sum(subnormal.values()):,} subnormal weights set to zero in {len(top)} tensors: {names}")
    bn_folds = fold_batch_norms(model)
    if bn_folds:
        more = f" (+{len(bn_folds) - 4} more)" if len(bn_folds) > 4 else ""
        notes.append(f"{len(bn_folds)} BatchNormalization folded into their Conv: {', '.join(bn_folds[:4])}{more}")
    upsamplings = conv_transposes_as_convs(model)
    if upsamplings:
        notes.append(f"{len(upsamplings)} ConvTranspose (kernel = stride) as 1x1 Conv + DepthToSpace")
    return subnormal


def prepare_model(
    source,
    shapes: dict | None = None,
    consts: dict | None = None,
    simplify: str = "auto",
    precision: str | None = None,
    flush_subnormals: bool = True,
) -> PreparedModel:
    """Load, validate, freeze constants, bind shapes and fold shape subgraphs (simplify: auto|always|never).
    `precision` (--dtype) is validated here and applied at import. Subnormal weights are set to zero unless
    `flush_subnormals=False` (onnx_rewrites.flush_subnormal_weights; ablations only).

    `source` is a file path, or an in-memory ModelProto (named `<memory:graph name>` in messages).
    """
    from tuner.core.precision import get_precision

    precision = get_precision(precision).name
    if isinstance(source, onnx.ModelProto):
        path = f"<memory:{source.graph.name or 'model'}>"
        model = onnx.ModelProto()
        model.CopyFrom(source)
        check_opset(model, path)
        run_checker(model, path)
        unknown_dims_as_dynamic(model)
        check_meaningful(model, path)
        digest = hashlib.sha256(source.SerializeToString()).hexdigest()
    else:
        path = source
        model = load_onnx(path)
        digest = sha256_file(path)
    constants_as_tensors(model)
    notes = _freeze_consts(model, consts or {}, path) if consts else []
    bound = bind_shapes(model, {i.name: i for i in graph_inputs(model)}, normalize_shapes(shapes), path)
    from tuner.frontend.if_folding import fold_constant_ifs

    taken = fold_constant_ifs(model)
    if taken:
        more = f" (+{len(taken) - 3} more)" if len(taken) > 3 else ""
        notes.append(
            f"{len(taken)} If folded to the branch their compile-time condition takes: {', '.join(taken[:3])}{more}"
        )
    folded: dict[str, int] = {}
    reasons = needs_shape_folding(model) if simplify == "auto" else []
    if simplify == "always" or reasons or consts:
        before = collections.Counter(n.op_type for n, _ in iter_nodes(model.graph))
        original = model
        model = _simplify(model, bound, path)
        restore_node_names(original.graph, model.graph)  # reports name the user's nodes, not onnxsim's
        after = collections.Counter(n.op_type for n, _ in iter_nodes(model.graph))
        folded = {op: before[op] - after.get(op, 0) for op in before if before[op] > after.get(op, 0)}
        why = reasons[0] + (f" (+{len(reasons) - 1} more)" if len(reasons) > 1 else "") if reasons else "requested"
        notes.append(
            f"shape subgraphs folded with onnxsim ({why}): {sum(before.values())} -> "
            f"{sum(after.values())} nodes"
            + (f"; removed {', '.join(f'{v} {k}' for k, v in sorted(folded.items()))}" if folded else "")
        )
    subnormal = _rewrite(model, notes, flush_subnormals)
    try:
        model = onnx.shape_inference.infer_shapes(model, strict_mode=False)
    except Exception as err:  # informative only; TVM infers its own shapes
        notes.append(f"ONNX shape inference failed ({err}); continuing")
    return PreparedModel(
        path=path,
        model=model,
        sha256=digest,
        inputs=graph_inputs(model),
        outputs=graph_outputs(model),
        shapes=bound,
        consts={k: np.asarray(v).tolist() for k, v in (consts or {}).items()},  # JSON-able
        notes=notes,
        folded=folded,
        precision=precision,
        index_ranges=index_ranges(model),
        subnormal_weights=subnormal,
    )
