"""Quantized ONNX ops (tuner/converters/quantized.py) against their definition in numpy, on models built here."""

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


def _qlinear_conv_reference(path, x):
    """QLinearConv by its definition (stride 2, pads 1): int64 sums, float32 requantization, round half to even."""
    model = onnx.load(path)
    t = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    xp = np.pad(x.astype(np.int64) - int(t["x_zp"]), ((0, 0), (0, 0), (1, 1), (1, 1)))
    w = t["w"].astype(np.int64) - t["w_zp"].astype(np.int64).reshape(-1, 1, 1, 1)
    windows = np.lib.stride_tricks.sliding_window_view(xp[0], (3, 3), axis=(1, 2))[:, ::2, ::2]  # c, 6, 6, 3, 3
    acc = np.einsum("chwij,ocij->ohw", windows, w) + t["bias"].reshape(-1, 1, 1)
    scale = (t["x_scale"] * t["w_scale"] / t["y_scale"]).astype(np.float32).reshape(-1, 1, 1)
    info = np.iinfo(x.dtype)
    return np.clip(np.rint(acc.astype(np.float32) * scale) + int(t["y_zp"]), info.min, info.max).astype(x.dtype)[None]


@pytest.mark.parametrize("per_channel,act", [(True, np.uint8), (False, np.int8)])
def test_qlinear_conv_matches_its_definition_exactly(tmp_path, per_channel, act):
    """Exact against QLinearConv's definition in numpy. ONNX Runtime was the reference until a Zen 3 machine: its
    u8 x s8 kernel on AVX2 without VNNI adds pairs of products in saturating int16 (78 of 576 outputs off by up to
    45 on this model, where ours matched the definition); on AVX-512 it had matched ours exactly."""
    import tvm
    from tvm import relax

    path = _qconv_model(str(tmp_path / "q.onnx"), per_channel, act)
    x = np.random.default_rng(1).integers(np.iinfo(act).min, np.iinfo(act).max, (1, 8, 12, 12)).astype(act)
    want = _qlinear_conv_reference(path, x)
    built = build_prepared(prepare_model(path), resolve_target("llvm"), get_strategy("tvm"))
    got = relax.VirtualMachine(built.executable, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    assert got.dtype == want.dtype and got.shape == want.shape
    diff = np.abs(got.astype(np.int32) - want.astype(np.int32))
    assert diff.max() == 0, f"{(diff > 0).sum()} of {diff.size} outputs differ, by up to {diff.max()}"
