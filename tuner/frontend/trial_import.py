"""A trial import that lists every node TVM's converters reject, for `check`: each rejected node is recorded and
stood in for by zeros of its output shapes, and the import goes on (the importer in collect mode)."""

from __future__ import annotations

import contextlib
import io
import warnings

from tuner.core.errors import TunerError
from tuner.core.native_log import quiet_native_stderr
from tuner.frontend.importer import _make_importer_class, _opset
from tuner.frontend.onnx_model import PreparedModel


def conversion_errors(prepared: PreparedModel, limit: int = 50) -> tuple[list[tuple[str, str, str]], bool]:
    """([(op, node, reason)] of every node TVM's converters reject, whether the list is complete). Each rejected
    node is stood in for by zeros of its output shapes and the import goes on; a rejected node whose output
    shapes shape inference does not know ends the search (the list is then incomplete)."""
    importer = _make_importer_class()(
        dict(prepared.shapes), {i.name: i.dtype for i in prepared.inputs}, keep_params_in_input=False, sanitize=True
    )
    importer.collect, importer.static_shapes = [], _static_shapes(prepared.model)
    complete = True
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), quiet_native_stderr():
        warnings.simplefilter("ignore")
        try:
            importer.from_onnx(prepared.model.graph, _opset(prepared.model))
        except TunerError as err:
            complete = False
            if not importer.collect:  # failed outside a node's converter
                importer.collect.append(("?", "?", err.message))
            del err
        errors = importer.collect[:limit]
        importer = None  # its BlockBuilder goes while TVM's warning about it is silenced
    return errors, complete and len(errors) <= limit


def _static_shapes(model) -> dict:
    """{tensor name: (static shape, numpy dtype)} from ONNX shape inference."""
    import onnx

    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:
        return {}
    out = {}
    for vi in list(inferred.graph.value_info) + list(inferred.graph.output):
        tt = vi.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
        if tt.elem_type and all(d is not None for d in dims):
            out[vi.name] = (tuple(dims), onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type))
    return out
