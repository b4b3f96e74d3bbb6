"""Convolution layouts on CPU (tuner/layout.py): structure before/after, numerics through real builds."""

import json

import numpy as np
import pytest
import tvm
from conftest import run_cli
from tvm import relax

from tuner.build.executable import build_prepared
from tuner.core.errors import TunerError
from tuner.core.target import resolve_target
from tuner.frontend.onnx_model import prepare_model
from tuner.fusion import get_strategy
from tuner.plan import build_plan
from tuner.transform.layout import ConvertConvLayout, clip_to_min_max, convs_to_nhwc_one_by_one, resolve_layout


def _conv_hswish(channels=16):
    """conv -> HardSwish's clip form -> conv, NCHW, as the ONNX importer writes it."""
    rng = np.random.default_rng(0)
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, channels, 8, 8), "float32"))
    w1 = relax.const(rng.standard_normal((channels, channels, 3, 3)).astype("float32"))
    w2 = relax.const(rng.standard_normal((channels, channels, 1, 1)).astype("float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(relax.op.nn.conv2d(x, w1, padding=1))
            gate = bb.emit(relax.op.clip(relax.op.add(y, relax.const(3.0, "float32")), 0, 6))
            h = bb.emit(relax.op.multiply(y, gate))
            out = bb.emit_output(relax.op.nn.conv2d(h, w2))
        bb.emit_func_output(out)
    return bb.get()


def _ops(mod) -> list[str]:
    ops = []
    relax.analysis.post_order_visit(
        mod["main"].body, lambda e: ops.append(e.op.name) if isinstance(e, relax.Call) else None
    )
    return ops


def test_clip_becomes_maximum_then_minimum():
    x = relax.Var("x", relax.TensorType((1, 4), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(relax.op.clip(x, 0, 6))
        bb.emit_func_output(out)
    expected = relax.BlockBuilder()
    with expected.function("main", [x]):
        with expected.dataflow():
            low = relax.op.maximum(x, relax.const(0.0, "float32"))
            out = expected.emit_output(relax.op.minimum(low, relax.const(6.0, "float32")))
        expected.emit_func_output(out)
    tvm.ir.assert_structural_equal(clip_to_min_max(bb.get()), expected.get())


def test_nhwc_chain_pays_one_transpose_at_entry_and_one_at_exit():
    """The element-wise HardSwish between the convs follows NHWC (no transposes around its clip)."""
    after = ConvertConvLayout("nhwc", 16)(_conv_hswish())
    ops = _ops(after)
    convs = []
    relax.analysis.post_order_visit(
        after["main"].body,
        lambda e: (
            convs.append(e.attrs.data_layout) if isinstance(e, relax.Call) and e.op.name == "relax.nn.conv2d" else None
        ),
    )
    assert convs == ["NHWC", "NHWC"]
    assert "relax.clip" not in ops
    # activations: one transpose in, one out (the weights' transposes are constants folded later)
    activation_transposes = [op for op in ops if op == "relax.permute_dims"]
    assert len(activation_transposes) == 2 + 2, ops


def test_nchwc_blocks_channels_and_leaves_unblockable_convs():
    after = ConvertConvLayout("nchwc", 8)(_conv_hswish(channels=16))
    layouts = []
    relax.analysis.post_order_visit(
        after["main"].body,
        lambda e: (
            layouts.append(e.attrs.data_layout)
            if isinstance(e, relax.Call) and e.op.name == "relax.nn.conv2d"
            else None
        ),
    )
    assert layouts == ["NCHW8c", "NCHW8c"]
    odd = ConvertConvLayout("nchwc", 8)(_conv_hswish(channels=6))  # 6 channels: no 8-wide blocks
    assert "relax.layout_transform" not in _ops(odd)


def test_convs_one_by_one_sit_between_two_transposes():
    """Where ConvertLayout fails, each plain conv becomes NHWC/OHWI between transposes; a grouped conv is left."""
    x = relax.Var("x", relax.TensorType((1, 8, 6, 1), "float32"))
    w = relax.const(np.ones((16, 8, 3, 1), "float32"))
    dw = relax.const(np.ones((16, 1, 3, 3), "float32"))

    def module(one_by_one: bool):
        bb = relax.BlockBuilder()
        with bb.function("main", [x]):
            with bb.dataflow():
                if one_by_one:
                    xt = relax.op.permute_dims(x, [0, 2, 3, 1])
                    wt = relax.op.permute_dims(w, [0, 2, 3, 1])
                    conv = relax.op.nn.conv2d(xt, wt, data_layout="NHWC", kernel_layout="OHWI", out_dtype="float32")
                    y = bb.emit(relax.op.permute_dims(conv, [0, 3, 1, 2]))
                else:
                    y = bb.emit(relax.op.nn.conv2d(x, w, out_dtype="float32"))
                out = bb.emit_output(relax.op.nn.conv2d(y, dw, padding=1, groups=16))
            bb.emit_func_output(out)
        return bb.get()

    tvm.ir.assert_structural_equal(convs_to_nhwc_one_by_one(module(False)), module(True))


def test_auto_is_nhwc_on_cpu_and_nchw_on_cuda():
    assert resolve_layout("auto", resolve_target("llvm")) == "nhwc"
    assert resolve_layout("auto", resolve_target("cuda:sm_90")) == "nchw"
    with pytest.raises(TunerError, match="for CPU targets"):
        resolve_layout("nhwc", resolve_target("cuda:sm_90"))


def test_mobilenet_block_in_nhwc_keeps_conv_and_hardswish_in_one_kernel(models_dir):
    plan = build_plan(str(models_dir / "mobilenet_block.onnx"), target="llvm", fusion="tvm", layout="nhwc")
    groups = [g.onnx_nodes for g in plan.groups]
    assert ["expand/conv", "expand/hswish"] in groups and ["dw/conv", "dw/hswish"] in groups
    transposes = [g for g in plan.groups if g.name.startswith("transpose")]
    assert [g.onnx_nodes for g in transposes] == [["expand/conv"]]  # the model input, into NHWC once


@pytest.mark.parametrize("layout", ["nhwc", "nchwc"])
def test_layouts_build_and_match_onnxruntime(models_dir, cnn, layout, tmp_path):
    """Every conv layout is a real build checked against ONNX Runtime (NCHWc through TOPI's conv2d_NCHWc)."""
    import onnxruntime as ort

    for model in (cnn, str(models_dir / "mobilenet_block.onnx")):
        built = build_prepared(prepare_model(model), resolve_target("llvm"), get_strategy("tvm"), layout=layout)
        assert built.layout == layout
        if layout == "nchwc":
            assert any("NCHWc" in k.kernel or "conv2d_NCHWc" in k.kernel for k in built.kernels) or model != cnn
        spec = prepare_model(model).inputs[0]
        x = np.random.default_rng(1).standard_normal(prepare_model(model).shapes[spec.name]).astype("float32")
        vm = relax.VirtualMachine(built.executable, tvm.cpu())
        got = vm["main"](tvm.runtime.tensor(x))
        got = (got[0] if not hasattr(got, "numpy") else got).numpy()
        sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
        want = sess.run(None, {spec.name: x})[0]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_layout_reaches_the_manifest_and_the_cli(cnn, tmp_path):
    out = str(tmp_path / "m.ftpkg")
    r = run_cli("compile", cnn, "--target", "llvm", "--layout", "nchw", "-o", out, "--json")
    assert r.returncode == 0, r.stderr
    info = run_cli("info", out, "--json")
    assert json.loads(info.stdout)["layout"] == "nchw"
    r = run_cli("compile", cnn, "--target", "cuda:sm_90", "--layout", "nhwc", "-o", out)
    assert r.returncode == 2 and "for CPU targets" in r.stderr and "Traceback" not in r.stderr
