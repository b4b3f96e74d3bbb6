"""Quantized ONNX ops (tuner/converters/quantized.py) against ONNX Runtime on models built here."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tuner.build.executable import build_prepared
from tuner.core.target import resolve_target
from tuner.frontend.onnx_model import prepare_model
from tuner.fusion import get_strategy


def _qconv_model(path, per_channel: bool, act_dtype=np.uint8):
    rng = np.random.default_rng(0)
    cin, cout = 8, 16
    w = rng.integers(-100, 100, (cout, cin, 3, 3)).astype(np.int8)
    w_scale = (rng.uniform(0.001, 0.01, cout) if per_channel else np.array(0.004)).astype(np.float32)
    inits = [
        numpy_helper.from_array(np.array(0.02, np.float32), "x_scale"),
        numpy_helper.from_array(np.array(128 if act_dtype == np.uint8 else 0, act_dtype), "x_zp"),
        numpy_helper.from_array(w, "w"),
        numpy_helper.from_array(w_scale, "w_scale"),
        numpy_helper.from_array(np.zeros(cout if per_channel else (), np.int8), "w_zp"),
        numpy_helper.from_array(np.array(0.05, np.float32), "y_scale"),
        numpy_helper.from_array(np.array(100 if act_dtype == np.uint8 else -3, act_dtype), "y_zp"),
        numpy_helper.from_array(rng.integers(-500, 500, cout).astype(np.int32), "bias"),
    ]
    qconv = helper.make_node(
        "QLinearConv",
        ["x", "x_scale", "x_zp", "w", "w_scale", "w_zp", "y_scale", "y_zp", "bias"],
        ["y"],
        name="qconv",
        pads=[1, 1, 1, 1],
        strides=[2, 2],
    )
    elem = TensorProto.UINT8 if act_dtype == np.uint8 else TensorProto.INT8
    graph = helper.make_graph(
        [qconv],
        "qconv",
        [helper.make_tensor_value_info("x", elem, [1, cin, 12, 12])],
        [helper.make_tensor_value_info("y", elem, [1, cout, 6, 6])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.save(model, path)
    return path


@pytest.mark.parametrize("per_channel,act", [(True, np.uint8), (False, np.int8)])
def test_qlinear_conv_matches_onnxruntime_exactly(tmp_path, per_channel, act):
    import onnxruntime as ort
    import tvm
    from tvm import relax

    path = _qconv_model(str(tmp_path / "q.onnx"), per_channel, act)
    x = np.random.default_rng(1).integers(np.iinfo(act).min, np.iinfo(act).max, (1, 8, 12, 12)).astype(act)
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    built = build_prepared(prepare_model(path), resolve_target("llvm"), get_strategy("tvm"))
    got = relax.VirtualMachine(built.executable, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    assert got.dtype == want.dtype and got.shape == want.shape
    diff = np.abs(got.astype(np.int32) - want.astype(np.int32))
    assert diff.max() == 0, f"{(diff > 0).sum()} of {diff.size} outputs differ, by up to {diff.max()}"
