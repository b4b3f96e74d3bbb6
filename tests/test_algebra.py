"""Graph algebra before fusion: before/after structure, and numerics through a real build (BN folding)."""

import numpy as np
import pytest
import tvm
from tvm import relax
from tvm.script import ir as I
from tvm.script import relax as R

from tuner.transform.algebra import GraphAlgebra, SumToAdd


def test_sum_of_same_shape_operands_becomes_adds():
    @I.ir_module
    class Before:
        @R.function
        def main(a: R.Tensor((2, 3), "float32"), b: R.Tensor((2, 3), "float32"), c: R.Tensor((2, 3), "float32")):
            with R.dataflow():
                ab = R.broadcast_to(a, R.shape([2, 3]))
                s = R.stack((ab, b, c), axis=0)
                out = R.sum(s, axis=[0], keepdims=False)
                R.output(out)
            return out

    @I.ir_module
    class Expected:
        @R.function
        def main(a: R.Tensor((2, 3), "float32"), b: R.Tensor((2, 3), "float32"), c: R.Tensor((2, 3), "float32")):
            with R.dataflow():
                lv = R.add(a, b)
                out = R.add(lv, c)
                R.output(out)
            return out

    after = relax.transform.DeadCodeElimination()(SumToAdd()(Before))
    tvm.ir.assert_structural_equal(after, Expected)


def test_sum_over_other_axis_is_kept():
    @I.ir_module
    class Before:
        @R.function
        def main(a: R.Tensor((2, 3), "float32"), b: R.Tensor((2, 3), "float32")):
            with R.dataflow():
                s = R.stack((a, b), axis=1)
                out = R.sum(s, axis=[1], keepdims=False)
                R.output(out)
            return out

    tvm.ir.assert_structural_equal(SumToAdd()(Before), Before)


def _conv_bn_module(w, gamma, beta, mean, var):
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 3, 8, 8), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            conv = bb.emit(relax.op.nn.conv2d(x, relax.const(w), padding=1))
            consts = [relax.const(v) for v in (gamma, beta, mean, var)]
            bn = bb.emit(relax.op.nn.batch_norm(conv, *consts, axis=1, epsilon=1e-5))
            out = bb.emit_output(relax.TupleGetItem(bn, 0))
        bb.emit_func_output(out)
    return bb.get()


def test_batch_norm_folds_into_conv_and_keeps_numerics():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, 3, 3, 3)).astype("float32")
    gamma, beta, mean = (rng.standard_normal(4).astype("float32") for _ in range(3))
    var = rng.uniform(0.5, 2.0, 4).astype("float32")
    before = _conv_bn_module(w, gamma, beta, mean, var)
    after = GraphAlgebra()(before)
    ops = []
    relax.analysis.post_order_visit(
        after["main"].body, lambda e: ops.append(e.op.name) if isinstance(e, relax.Call) else None
    )
    assert "relax.nn.batch_norm" not in ops and ops.count("relax.nn.conv2d") == 1, ops

    x = rng.standard_normal((1, 3, 8, 8)).astype("float32")
    results = []
    for mod in (before, after):
        mod = relax.transform.DecomposeOpsForInference()(mod)
        ex = tvm.compile(mod, target="llvm")
        vm = relax.VirtualMachine(ex, tvm.cpu())
        results.append(vm["main"](tvm.runtime.tensor(x)).numpy())
    np.testing.assert_allclose(results[1], results[0], rtol=1e-4, atol=1e-4)


def _upsampling_model(path, k=2, stride=2, with_bn=True, pads=(0, 0, 0, 0), constant_nodes=False):
    """x -> ConvTranspose(k x k, stride, bias) -> [BatchNormalization] -> Relu, as DB-style decoders end."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(1)
    cin, cout = 6, 4
    inits = [
        numpy_helper.from_array(rng.standard_normal((cin, cout, k, k)).astype("float32"), "w"),
        numpy_helper.from_array(rng.standard_normal(cout).astype("float32"), "b"),
    ]
    nodes = [helper.make_node("ConvTranspose", ["x", "w", "b"], ["up"], "up", strides=[stride] * 2, pads=list(pads))]
    if constant_nodes:  # as paddle2onnx exports weights (PP-OCR)
        nodes = [helper.make_node("Constant", [], [t.name], value=t) for t in inits] + nodes
        del inits[:]
    last = "up"
    if with_bn:
        for name, arr in zip("sbmv", (*(rng.standard_normal((3, cout)).astype("float32")), rng.uniform(0.5, 2, cout))):
            inits.append(numpy_helper.from_array(np.asarray(arr, "float32"), f"bn_{name}"))
        nodes.append(helper.make_node("BatchNormalization", ["up", "bn_s", "bn_b", "bn_m", "bn_v"], ["bn"], "bn"))
        last = "bn"
    nodes.append(helper.make_node("Relu", [last], ["y"], "relu"))
    graph = helper.make_graph(
        nodes,
        "upsampling",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, cin, 5, 7])],
        [
            helper.make_tensor_value_info(
                "y", TensorProto.FLOAT, [1, cout, *(((n - 1) * stride + k - 2 * pads[0]) for n in (5, 7))]
            )
        ],
        inits,
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


@pytest.mark.parametrize("constant_nodes", [False, True])
def test_conv_transpose_with_kernel_equal_to_stride_becomes_conv_and_depth_to_space(tmp_path, constant_nodes):
    from tuner.commands.compile import compile_model
    from tuner.frontend.onnx_model import prepare_model
    from tuner.report.reference import compare_outputs, run_onnxruntime
    from tuner.runtime import load

    path = _upsampling_model(str(tmp_path / "up.onnx"), constant_nodes=constant_nodes)
    prepared = prepare_model(path)
    ops = [n.op_type for n in prepared.model.graph.node]
    assert ops == ["Conv", "DepthToSpace", "Relu"], ops  # BN folded into the ConvTranspose first, constants used
    assert prepared.model.graph.node[0].name == "up"  # plans map the kernel back to the ONNX node
    assert any("ConvTranspose" in n for n in prepared.notes) and any("BatchNormalization" in n for n in prepared.notes)
    compile_model(path, str(tmp_path / "up.ftpkg"), target="llvm")
    x = np.random.default_rng(2).standard_normal((1, 6, 5, 7)).astype("float32")
    ours = load(str(tmp_path / "up.ftpkg"))(x)
    assert compare_outputs(ours, run_onnxruntime(path, {"x": x}))["ok"]


def test_overlapping_or_padded_conv_transpose_is_kept(tmp_path):
    from tuner.frontend.onnx_model import prepare_model

    for i, kwargs in enumerate([{"k": 3, "stride": 2}, {"pads": (1, 1, 1, 1)}, {"k": 2, "stride": 1}]):
        prepared = prepare_model(_upsampling_model(str(tmp_path / f"m{i}.onnx"), with_bn=False, **kwargs))
        assert [n.op_type for n in prepared.model.graph.node] == ["ConvTranspose", "Relu"], kwargs


def test_batch_norm_with_constant_of_shape_statistics_folds_into_the_conv(tmp_path):
    """Exporters (and the ONNX zoo's light models, for every weight) build tensors with ConstantOfShape: they are
    constants too, so the batch-norm folds in ONNX and the conv keeps its name, and its output."""
    import onnx
    from onnx import helper, numpy_helper

    from tuner.commands.compile import compile_model
    from tuner.frontend.onnx_model import prepare_model
    from tuner.report.reference import compare_outputs, run_onnxruntime
    from tuner.runtime import load

    rng = np.random.default_rng(3)
    w = rng.standard_normal((4, 3, 3, 3)).astype("float32")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1])]
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.array([4], "int64"), "four")]
    for name, value in (("scale", 1.5), ("shift", 0.25), ("mean", 0.5), ("var", 2.0)):
        fill = helper.make_tensor("value", onnx.TensorProto.FLOAT, [1], [value])
        nodes.append(helper.make_node("ConstantOfShape", ["four"], [name], value=fill))
    nodes.append(helper.make_node("BatchNormalization", ["c", "scale", "shift", "mean", "var"], ["y"], name="bn"))
    graph = helper.make_graph(
        nodes,
        "conv_bn",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3, 6, 6])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 4, 6, 6])],
        inits,
    )
    path = str(tmp_path / "conv_bn.onnx")
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    prepared = prepare_model(path)
    assert [(n.op_type, n.name) for n in prepared.model.graph.node] == [("Conv", "conv")]
    compile_model(path, str(tmp_path / "conv_bn.ftpkg"), target="llvm")
    x = rng.standard_normal((1, 3, 6, 6)).astype("float32")
    assert compare_outputs(load(str(tmp_path / "conv_bn.ftpkg"))(x), run_onnxruntime(path, {"x": x}))["ok"]


def test_inference_dropout_is_the_identity_and_a_read_mask_keeps_it():
    from tuner.transform.algebra import drop_dropout

    x = relax.Var("x", relax.TensorType((1, 4), "float32"))

    def module(read_mask: bool):
        bb = relax.BlockBuilder()
        with bb.function("main", [x]):
            with bb.dataflow():
                d = bb.emit(relax.op.nn.dropout(x, 0.5))
                out = relax.op.nn.relu(bb.emit(relax.TupleGetItem(d, 0)))
                if read_mask:
                    out = relax.op.add(out, bb.emit(relax.TupleGetItem(d, 1)))
                out = bb.emit_output(out)
            bb.emit_func_output(out)
        return bb.get()

    expected = relax.BlockBuilder()
    with expected.function("main", [x]):
        with expected.dataflow():
            out = expected.emit_output(relax.op.nn.relu(x))
        expected.emit_func_output(out)
    tvm.ir.assert_structural_equal(
        relax.analysis.remove_all_unused(drop_dropout(module(False))["main"]), expected.get()["main"]
    )
    kept = drop_dropout(module(True))["main"]
    ops = []
    relax.analysis.post_order_visit(kept.body, lambda e: ops.append(e.op.name) if isinstance(e, relax.Call) else None)
    assert "relax.nn.dropout" in ops  # the mask is still computed
