"""Binding input shapes into the graph: pinned dimensions become numbers, ranges (`DimRange`) named symbolic
dimensions that the importer turns into Relax's symbolic shape variables."""

from __future__ import annotations

import onnx

from tuner.core.errors import TunerError
from tuner.core.shapes import DimRange, format_dims


def bind_shapes(model: onnx.ModelProto, inputs: dict, shapes: dict, path: str) -> dict[str, tuple]:
    """Every input's shape (`inputs`: {name: TensorInfo}) from --input-shape or the model: ints are pinned into
    the graph, a `DimRange` becomes a
    named symbolic dimension (the model's own name for it where it has one, so that inputs sharing a dimension,
    input_ids and attention_mask, share one variable)."""
    for name in shapes:
        if name not in inputs:
            raise TunerError(
                f"--input-shape {name}: {path} has no input named {name!r}",
                f"inputs are: {', '.join(i.describe() for i in inputs.values()) or '(none)'}",
            )
    bound: dict[str, tuple] = {}
    missing = []
    for name, info in inputs.items():
        if name in shapes:
            bound[name] = _checked_shape(info, tuple(shapes[name]))
        elif info.dynamic_dims or info.shape == [None]:
            missing.append(info)
        else:
            bound[name] = tuple(info.shape)
    if missing:
        example = " ".join(
            f"{i.name}:{'x'.join(str(d) if isinstance(d, int) else '1' for d in i.shape)}" for i in missing
        )
        raise TunerError(
            f"{path}: dynamic dimensions need --input-shape: " + ", ".join(i.describe() for i in missing),
            f"bind them, e.g. --input-shape {example!r} (a range of sizes: LO..HI for a dimension)",
        )
    names = symbolic_dim_names(inputs, bound)
    for vi in model.graph.input:
        if vi.name in bound:
            dims = vi.type.tensor_type.shape.dim
            del dims[:]
            for d, dim_name in zip(bound[vi.name], names[vi.name]):
                if dim_name is None:
                    dims.add().dim_value = d
                else:
                    dims.add().dim_param = dim_name
    return bound


def _checked_shape(info, want: tuple) -> tuple:
    if info.shape != [None] and len(info.shape) != len(want):
        raise TunerError(
            f"--input-shape {info.name}:{format_dims(want)} has rank {len(want)}, "
            f"but input {info.describe()} has rank {len(info.shape)}"
        )
    for d_model, d_want in zip(info.shape, want):
        if isinstance(d_model, int) and d_model != d_want:
            raise TunerError(
                f"--input-shape {info.name}:{format_dims(want)} contradicts the model's fixed shape {info.describe()}",
                "only the dimensions the model leaves dynamic can take another size or a range",
            )
    return want


def symbolic_dim_names(inputs: dict, bound: dict) -> dict[str, list]:
    """{input: [None for a pinned dimension, else the symbolic name of its range]}. The model's dim_param is kept
    (as a C identifier); an unnamed dynamic dimension is named after its input and axis. Inputs that share a name
    must give it one range."""
    import re

    names, ranges = {}, {}
    for name, shape in bound.items():
        info = inputs[name]
        row = []
        for axis, d in enumerate(shape):
            if not isinstance(d, DimRange):
                row.append(None)
                continue
            given = info.shape[axis] if axis < len(info.shape) and isinstance(info.shape[axis], str) else None
            dim_name = re.sub(r"\W", "_", given or f"{name}_{axis}")
            dim_name = dim_name if dim_name[0].isalpha() else f"d_{dim_name}"
            if ranges.setdefault(dim_name, (name, d))[1] != d:
                first, r = ranges[dim_name]
                raise TunerError(
                    f"--input-shape gives dimension {dim_name!r} the range {r} on {first} and {d} on {name}",
                    "the model uses one size for both: give them the same range",
                )
            row.append(dim_name)
        names[name] = row
    return names
