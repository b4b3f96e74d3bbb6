"""FlattenPointwiseConvs (tuner/transform/pointwise_matmul.py): which 1x1 convs become matmuls over their pixels,
the graph before and after, how far their epilogue follows them, and the numbers through a real build against
ONNX Runtime."""

import numpy as np
import onnx
import pytest
import tvm
from onnx import TensorProto, helper, numpy_helper
from tvm import relax

from tuner.transform.pointwise_matmul import (
    flatten_pointwise_convs,
    flattened_maps,
    pixel_rows,
    view,
    worth_flattening,
)

AVX2_ROWS, AVX2 = 6, 8  # rows beside two vectors with 16 registers; lanes
RNG = np.random.default_rng(0)


def _const(shape):
    return relax.const(RNG.standard_normal(shape).astype("float32"))


def _conv(x, weight, stride=1, padding=0):
    return relax.op.nn.conv2d(
        x, weight, strides=stride, padding=padding, data_layout="NHWC", kernel_layout="OHWI", out_dtype="float32"
    )


def _function(body, size=13, channels=16, extra_params=()):
    """main(x: (1, size, size, channels), *extra_params) whose dataflow block `body(bb, x, *params)` fills."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType([1, size, size, channels], "float32"))
    params = [relax.Var(name, relax.TensorType(shape, "float32")) for name, shape in extra_params]
    with bb.function("main", [x, *params]):
        with bb.dataflow():
            out = bb.emit_output(body(bb, x, *params))
        bb.emit_func_output(out)
    return bb.get()


def _ops(mod) -> list[str]:
    """The ops of main in order; the VM's reshape (a view) as `view`."""
    names = []

    def visit(expr):
        if isinstance(expr, relax.Call) and hasattr(expr.op, "name"):
            name = expr.op.name.removeprefix("relax.")
            names.append("view" if "vm.builtin.reshape" in str(expr.args[0]) else name)

    relax.analysis.post_order_visit(mod["main"], visit)
    return names


def test_which_maps_the_conv_divides_badly():
    assert pixel_rows(13, 13, AVX2_ROWS) == (1, 5)  # 169 pixels padded to 170: 5-row blocks
    assert pixel_rows(7, 7, AVX2_ROWS) == (1, 5)  # 49 -> 50
    assert pixel_rows(14, 14, AVX2_ROWS) == (4, 4)  # 2 x 2 rows already: left a conv
    assert pixel_rows(10, 10, AVX2_ROWS)[0] == 5
    assert pixel_rows(7, 7, 14)[0] == 7  # AVX-512: 7 rows of 14 already
    assert worth_flattening(13, 13, 1000, AVX2)  # 1 row x 5 vectors as a conv: 2 x 5 as a matmul
    assert worth_flattening(7, 7, 128, AVX2)  # 7 x 1 as a conv, 5 x 2 as a matmul
    assert not worth_flattening(7, 7, 232, AVX2)  # 29 vectors: 5 x 1 as a matmul
    assert not worth_flattening(7, 7, 128, 16) and not worth_flattening(14, 14, 128, AVX2)


def test_a_1x1_conv_with_its_bias_and_relu_becomes_one_matmul_over_the_pixels():
    weight, bias = _const([32, 1, 1, 16]), _const([1, 1, 1, 32])

    def before_body(bb, x):
        y = bb.emit(_conv(x, weight))
        return bb.emit(relax.op.nn.relu(bb.emit(relax.op.add(y, bias))))

    def expected_body(bb, x):
        pixels = bb.emit(view(x, [1, 169, 16]))
        w = relax.op.permute_dims(relax.op.reshape(weight, [32, 16]), [1, 0])
        y = bb.emit(relax.op.matmul(pixels, w, out_dtype="float32"))
        biased = bb.emit(relax.op.add(y, relax.op.reshape(bias, [1, 1, 32])))
        activated = bb.emit(relax.op.nn.relu(biased))
        return bb.emit(view(activated, [1, 13, 13, 32]))

    after = flatten_pointwise_convs(_function(before_body), AVX2)
    tvm.ir.assert_structural_equal(after["main"], _function(expected_body)["main"], map_free_vars=True)
    assert flattened_maps(after) == {"13x13": 1}


def test_the_epilogue_follows_through_two_reads_and_a_residual():
    """Hard-swish reads the conv's result twice; a residual computed elsewhere is reshaped as a view: every
    element-wise op runs over the pixels, and one reshape back to the map is left."""
    weight = _const([16, 1, 1, 16])

    def body(bb, x, residual):
        y = bb.emit(_conv(x, weight))
        shifted = bb.emit(relax.op.add(y, relax.const(3.0)))
        gate = bb.emit(relax.op.minimum(bb.emit(relax.op.maximum(shifted, relax.const(0.0))), relax.const(6.0)))
        swished = bb.emit(relax.op.multiply(y, gate))
        return bb.emit(relax.op.add(swished, residual))

    after = flatten_pointwise_convs(_function(body, extra_params=[("r", [1, 13, 13, 16])]), AVX2)
    ops = _ops(after)
    assert "nn.conv2d" not in ops and ops.count("matmul") == 1
    assert ops.count("reshape") == 1  # the weight's (folded at build time)
    assert ops.count("view") == 3  # the pixels, the residual, and the result back to the map
    relax.analysis.well_formed(after)  # raises when it is not


def test_two_flattened_convs_in_a_row_pass_the_pixels_on_without_views():
    first, second = _const([16, 1, 1, 16]), _const([16, 1, 1, 16])

    def body(bb, x):
        y = bb.emit(relax.op.nn.relu(bb.emit(_conv(x, first))))
        return bb.emit(_conv(y, second))

    ops = _ops(flatten_pointwise_convs(_function(body), AVX2))
    assert ops.count("matmul") == 2 and ops.count("view") == 2  # into the first, out of the second


def test_the_reshape_back_stops_at_an_op_that_needs_the_map():
    weight, rows_scale = _const([16, 1, 1, 16]), _const([1, 13, 1, 16])  # broadcast along the height only

    def body(bb, x):
        y = bb.emit(relax.op.nn.relu(_conv(x, weight)))
        scaled = bb.emit(relax.op.multiply(y, rows_scale))
        return bb.emit(relax.op.nn.max_pool2d(scaled, layout="NHWC"))

    ops = _ops(flatten_pointwise_convs(_function(body), AVX2))
    assert ops.index("nn.relu") < ops.index("multiply")
    assert ops[ops.index("nn.relu") + 1] == "view"  # relu over the pixels, the map back before the multiply


@pytest.mark.parametrize(
    "size, stride, kernel, weight_at_run_time",
    [(14, 1, 1, False), (13, 2, 1, False), (13, 1, 3, False), (13, 1, 1, True)],
    ids=["14x14 map", "stride 2", "3x3 conv", "weight computed at run time"],
)
def test_what_stays_a_conv(size, stride, kernel, weight_at_run_time):
    extra = [("w", [16, 1, 1, 16])] if weight_at_run_time else []
    weight = _const([16, kernel, kernel, 16])

    def body(bb, x, *params):
        return bb.emit(_conv(x, params[0] if params else weight, stride=stride, padding=kernel // 2))

    mod = _function(body, size=size, extra_params=extra)
    after = flatten_pointwise_convs(mod, AVX2)
    assert after.same_as(mod) and flattened_maps(after) == {}


def _fire_like():
    """A 1x1 conv + bias + relu on 13 x 13, a residual add with the input, then a 3x3 conv: NCHW, as exported."""
    rng = np.random.default_rng(2)
    inits = [
        numpy_helper.from_array(rng.standard_normal((24, 24, 1, 1)).astype("float32") * 0.2, "w1"),
        numpy_helper.from_array(rng.standard_normal((24,)).astype("float32"), "b1"),
        numpy_helper.from_array(rng.standard_normal((16, 24, 3, 3)).astype("float32") * 0.1, "w2"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], kernel_shape=[1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Add", ["r1", "x"], ["s1"]),
        helper.make_node("Conv", ["s1", "w2"], ["out"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
    ]
    graph = helper.make_graph(
        nodes,
        "fire_like",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 24, 13, 13])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 16, 13, 13])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_flattened_convs_compute_what_onnx_runtime_computes(tmp_path):
    """Through compile: the 13 x 13 1x1 conv becomes a padded matmul (both said in the package's preparation
    notes), and the package matches ONNX Runtime."""
    ort = pytest.importorskip("onnxruntime")
    import tuner
    from tuner.commands.compile import compile_model

    path = str(tmp_path / "fire_like.onnx")
    onnx.save(_fire_like(), path)
    package = str(tmp_path / "m.ftpkg")
    _, manifest = compile_model(path, package, target="llvm:znver3")
    notes = manifest["preparation"]
    assert any("1x1 convs as matmuls over their pixels" in n and "1 on 13x13 maps" in n for n in notes), notes
    assert any("padded rows 169 -> 170" in n for n in notes), notes
    model = tuner.load(package)
    x = np.random.default_rng(3).standard_normal((1, 24, 13, 13)).astype("float32")
    expected = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(model(x=x)["out"], expected, rtol=1e-4, atol=1e-3)


def test_the_plan_names_the_onnx_nodes_of_flattened_convs_and_says_why(tmp_path):
    """The views before and after the matmul do not cut the plan's data flow: its kernels keep their ONNX nodes."""
    from tuner.plan.provenance import build_plan

    path = str(tmp_path / "fire_like.onnx")
    onnx.save(_fire_like(), path)
    plan = build_plan(path, target="llvm:znver3")
    ops = {m.onnx_op for g in plan.groups if g.launched for m in g.members}
    assert {"Conv", "Relu", "Add"} <= ops and None not in ops, ops
    assert "1x1 convs as matmuls over their pixels (whole register blocks): 1 on 13x13 maps" in plan.notes
