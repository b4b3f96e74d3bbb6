"""Channels-last convs padded to a multiple of the vector lanes (tuner/channel_padding.py): the rewritten graph
against the expected one, the cases left alone, and an ONNX classifier head built through the real pipeline and
checked against ONNX Runtime."""

import numpy as np
import tvm
from conftest import assert_matches_onnxruntime, save_onnx
from tvm import relax

from tuner.transform.channel_padding import pad_conv_channels

RNG = np.random.default_rng(0)


def _head(channels: int, groups: int = 1, layout: str = "NHWC", residual: bool = False):
    """conv (64 -> channels) + bias + relu + mean over H, W; with `residual`, + x (an activation) after relu."""
    shape = (1, 13, 13, 64) if layout == "NHWC" else (1, 64, 13, 13)
    x = relax.Var("x", relax.TensorType(shape, "float32"))
    w_shape = (channels, 1, 1, 64 // groups) if layout == "NHWC" else (channels, 64 // groups, 1, 1)
    w = relax.const(RNG.standard_normal(w_shape).astype("float32"))
    b_shape = (1, 1, 1, channels) if layout == "NHWC" else (1, channels, 1, 1)
    b = relax.const(RNG.standard_normal(b_shape).astype("float32"))
    kernel_layout = "OHWI" if layout == "NHWC" else "OIHW"
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            c = bb.emit(relax.op.nn.conv2d(x, w, groups=groups, data_layout=layout, kernel_layout=kernel_layout))
            y = bb.emit(relax.op.nn.relu(bb.emit(relax.op.add(c, b))))
            if residual:
                y = bb.emit(relax.op.add(y, x))
            out = bb.emit_output(relax.op.mean(y, axis=[1, 2] if layout == "NHWC" else [2, 3]))
        bb.emit_func_output(out)
    return bb.get(), w, b


def test_conv_bias_and_activation_run_on_padded_channels_and_the_slice_ends_before_the_pool():
    before, w, b = _head(1000)
    x = before["main"].params[0]
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            zeros = relax.const(np.zeros((8, 1, 1, 64), "float32"))
            ones = relax.const(np.ones((1, 1, 1, 8), "float32"))
            c = bb.emit(
                relax.op.nn.conv2d(
                    x, bb.emit(relax.op.concat([w, zeros], axis=0)), data_layout="NHWC", kernel_layout="OHWI"
                )
            )
            y = bb.emit(relax.op.nn.relu(bb.emit(relax.op.add(c, bb.emit(relax.op.concat([b, ones], axis=3))))))
            sliced = bb.emit(relax.op.strided_slice(y, axes=[3], begin=[0], end=[1000]))
            out = bb.emit_output(relax.op.mean(sliced, axis=[1, 2]))
        bb.emit_func_output(out)
    tvm.ir.assert_structural_equal(pad_conv_channels(before, lanes=16), bb.get())


def test_divisible_costly_grouped_and_channels_first_convs_are_left_alone():
    for channels, groups, layout in ((1008, 1, "NHWC"), (24, 1, "NHWC"), (1000, 8, "NHWC"), (1000, 1, "NCHW")):
        mod, _, _ = _head(channels, groups, layout)
        assert pad_conv_channels(mod, lanes=16).same_as(mod), (channels, groups, layout)


def test_slice_stops_at_an_activation_operand():
    """relu(conv + b) * s with s an input: s is no constant, so the slice ends before the multiply."""
    head, _, _ = _head(1000)
    x = head["main"].params[0]
    s = relax.Var("s", relax.TensorType((1, 13, 13, 1000), "float32"))
    conv, bias = (b.value for b in head["main"].body.blocks[0].bindings[:2])
    bb = relax.BlockBuilder()
    with bb.function("main", [x, s]):
        with bb.dataflow():
            y = bb.emit(relax.op.nn.relu(bb.emit(relax.op.add(bb.emit(conv), bias.args[1]))))
            out = bb.emit_output(relax.op.multiply(y, s))
        bb.emit_func_output(out)
    after = pad_conv_channels(bb.get(), lanes=16)
    shapes = {
        b.value.op.name: [int(d) for d in b.var.ty.shape]
        for b in after["main"].body.blocks[0].bindings
        if isinstance(b.value, relax.Call)
    }
    assert shapes["relax.nn.relu"][-1] == 1008 and shapes["relax.multiply"][-1] == 1000, shapes
    assert shapes["relax.strided_slice"][-1] == 1000


def _run(mod, x):
    vm = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
    return vm["main"](tvm.runtime.tensor(x)).numpy()


def test_padded_head_computes_the_same():
    mod, _, _ = _head(1000)
    x = RNG.standard_normal((1, 13, 13, 64)).astype("float32")
    np.testing.assert_allclose(_run(pad_conv_channels(mod, lanes=16), x), _run(mod, x), rtol=1e-5, atol=1e-5)


def _onnx_head(path: str, channels: int) -> str:
    """A SqueezeNet-style classifier head: Conv 3x3 -> Relu -> Conv 1x1 (channels) -> Relu -> GlobalAveragePool."""
    from onnx import helper, numpy_helper

    def weight(name, *shape):
        return numpy_helper.from_array((RNG.standard_normal(shape) * 0.2).astype("float32"), name)

    inits = [weight("w0", 32, 3, 3, 3), weight("w1", channels, 32, 1, 1), weight("b1", channels)]
    nodes = [
        helper.make_node("Conv", ["input", "w0"], ["c0"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c0"], ["r0"]),
        helper.make_node("Conv", ["r0", "w1", "b1"], ["c1"]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("GlobalAveragePool", ["r1"], ["output"]),
    ]
    return save_onnx(path, nodes, {"input": (1, 3, 13, 13)}, {"output": (1, channels, 1, 1)}, inits)


def test_onnx_head_builds_with_padded_channels_and_matches_onnxruntime(tmp_path):
    """Through the real pipeline (NHWC, default schedules, packed weights): the 1x1 conv computes a multiple of the
    target's lanes, and the output matches ONNX Runtime's."""
    from tuner.build.executable import build_prepared
    from tuner.core.ir import buffer_shapes, kernel_scripts
    from tuner.core.target import resolve_target, vector_lanes
    from tuner.frontend.onnx_model import prepare_model
    from tuner.fusion import get_strategy

    spec = resolve_target("llvm")
    lanes = vector_lanes(spec)
    channels = 196  # 16 lanes: 208, 8 lanes: 200
    model = _onnx_head(str(tmp_path / "head.onnx"), channels)
    built = build_prepared(prepare_model(model), spec, get_strategy("tvm"), layout="nhwc")
    padded = -(-channels // lanes) * lanes
    widths = {
        shape[-1] for script in kernel_scripts(built.fused_mod).values() for shape in buffer_shapes(script) if shape
    }
    assert padded in widths, widths
    assert_matches_onnxruntime(
        built.executable, model, {"input": RNG.standard_normal((1, 3, 13, 13)).astype("float32")}
    )


def _classifier(columns: int, rows: int = 40, k: int = 120):
    """x[rows, k] @ W[k, columns] + b, then softmax over the columns (a text recognizer's last layer)."""
    x = relax.Var("x", relax.TensorType((rows, k), "float32"))
    w = relax.const(RNG.standard_normal((k, columns)).astype("float32"))
    b = relax.const(RNG.standard_normal((columns,)).astype("float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(relax.op.add(bb.emit(relax.op.matmul(x, w)), b))
            out = bb.emit_output(relax.op.nn.softmax(y, axis=-1))
        bb.emit_func_output(out)
    return bb.get(), w, b


def test_a_matmul_by_a_constant_runs_on_padded_columns_and_the_slice_ends_before_the_softmax():
    before, w, b = _classifier(6625)  # 6625 = 5^3 x 53: no vector width divides it
    x = before["main"].params[0]
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            padded_w = bb.emit(relax.op.concat([w, relax.const(np.zeros((120, 15), "float32"))], axis=1))
            mm = bb.emit(relax.op.matmul(x, padded_w))
            padded_b = bb.emit(relax.op.concat([b, relax.const(np.ones((15,), "float32"))], axis=0))
            y = bb.emit(relax.op.add(mm, padded_b))
            sliced = bb.emit(relax.op.strided_slice(y, axes=[1], begin=[0], end=[6625]))
            out = bb.emit_output(relax.op.nn.softmax(sliced, axis=-1))
        bb.emit_func_output(out)
    tvm.ir.assert_structural_equal(pad_conv_channels(before, lanes=16), bb.get())


def test_matmuls_left_alone_divisible_costly_or_by_an_activation():
    for columns in (6640, 10):  # already a multiple; 10 -> 16 would be 60% more work
        mod, _, _ = _classifier(columns)
        assert pad_conv_channels(mod, lanes=16).same_as(mod), columns
    x = relax.Var("x", relax.TensorType((40, 120), "float32"))
    y = relax.Var("y", relax.TensorType((120, 6625), "float32"))  # an input, not a weight
    bb = relax.BlockBuilder()
    with bb.function("main", [x, y]):
        with bb.dataflow():
            out = bb.emit_output(relax.op.matmul(x, y))
        bb.emit_func_output(out)
    mod = bb.get()
    assert pad_conv_channels(mod, lanes=16).same_as(mod)


def test_padded_classifier_computes_the_same():
    mod, _, _ = _classifier(6625)
    x = RNG.standard_normal((40, 120)).astype("float32")
    np.testing.assert_allclose(_run(pad_conv_channels(mod, lanes=16), x), _run(mod, x), rtol=1e-5, atol=1e-6)


def test_onnx_classifier_builds_with_padded_columns_and_matches_onnxruntime(tmp_path):
    """MatMul + Add + Softmax over 6625 classes through the real pipeline: the matmul's kernel computes a multiple
    of the target's lanes, the output matches ONNX Runtime's."""
    from onnx import helper, numpy_helper

    from tuner.build.executable import build_prepared
    from tuner.core.ir import buffer_shapes, kernel_scripts
    from tuner.core.target import resolve_target, vector_lanes
    from tuner.frontend.onnx_model import prepare_model
    from tuner.fusion import get_strategy

    columns = 6625
    inits = [
        numpy_helper.from_array((RNG.standard_normal((120, columns)) * 0.1).astype("float32"), "w"),
        numpy_helper.from_array(RNG.standard_normal(columns).astype("float32"), "b"),
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["mm"]),
        helper.make_node("Add", ["mm", "b"], ["logits"]),
        helper.make_node("Softmax", ["logits"], ["probs"], axis=-1),
    ]
    model = save_onnx(str(tmp_path / "cls.onnx"), nodes, {"x": (1, 40, 120)}, {"probs": (1, 40, columns)}, inits)
    spec = resolve_target("llvm")
    built = build_prepared(prepare_model(model), spec, get_strategy("tvm"))
    padded = -(-columns // vector_lanes(spec)) * vector_lanes(spec)
    widths = {s[-1] for script in kernel_scripts(built.fused_mod).values() for s in buffer_shapes(script) if s}
    assert padded in widths, widths
    assert_matches_onnxruntime(built.executable, model, {"x": RNG.standard_normal((1, 40, 120)).astype("float32")})
