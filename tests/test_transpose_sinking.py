"""Layout transposes moved down until they cancel (tuner/transpose_sinking.py): structure before/after, numerics
of the rewritten graph through real builds, and a held-out-style ONNX graph against ONNX Runtime."""

import numpy as np
import pytest
import tvm
from conftest import assert_matches_onnxruntime, save_onnx
from tvm import relax

from tuner.transform.algebra import drop_dropout
from tuner.transform.layout import convs_to_nhwc_one_by_one
from tuner.transform.transpose_sinking import sink_transposes

TO_NHWC, TO_NCHW = [0, 2, 3, 1], [0, 3, 1, 2]
RNG = np.random.default_rng(0)


def _const(*shape):
    return relax.const(RNG.standard_normal(shape).astype("float32"))


def _function(x, body):
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(body(bb))
        bb.emit_func_output(out)
    return bb.get()


def _permutes(mod) -> list:
    """The transposes of activations (a weight's is a constant, folded at build time)."""
    found = []

    def visit(e):
        if isinstance(e, relax.Call) and e.op.name == "relax.permute_dims":
            if not isinstance(e.args[0], tvm.ir.expr.Constant):
                found.append([int(a) for a in e.attrs.axes])

    relax.analysis.post_order_visit(mod["main"].body, visit)
    return found


def _run(mod, x):
    vm = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
    return vm["main"](tvm.runtime.tensor(x)).numpy()


def test_activation_moves_below_and_meets_the_inverse():
    """permute back -> relu -> permute forward (the next conv's input) becomes relu alone."""
    x = relax.Var("x", relax.TensorType((1, 4, 5, 5), "float32"))
    before = _function(
        x,
        lambda bb: relax.op.permute_dims(
            bb.emit(relax.op.nn.relu(bb.emit(relax.op.permute_dims(x, TO_NCHW)))), TO_NHWC
        ),
    )
    expected = _function(x, lambda bb: relax.op.nn.relu(x))
    tvm.ir.assert_structural_equal(sink_transposes(before), expected)


def test_per_channel_constant_is_transposed_with_the_operand():
    """A rank-3 [C, 1, 1] constant (a decomposed batch-norm's scale) is moved into NHWC as [1, 1, 1, C]."""
    x = relax.Var("x", relax.TensorType((1, 5, 5, 4), "float32"))
    scale = RNG.standard_normal((4, 1, 1)).astype("float32")
    before = _function(x, lambda bb: relax.op.multiply(bb.emit(relax.op.permute_dims(x, TO_NCHW)), relax.const(scale)))
    expected = _function(
        x,
        lambda bb: relax.op.permute_dims(
            bb.emit(relax.op.multiply(x, relax.const(scale.reshape(1, 4, 1, 1).transpose(TO_NHWC)))), TO_NCHW
        ),
    )
    tvm.ir.assert_structural_equal(sink_transposes(before), expected)


def test_a_transpose_read_twice_stays_where_it_is():
    """Moving it below one of two readers would add a transpose, not remove one."""
    x = relax.Var("x", relax.TensorType((1, 5, 5, 4), "float32"))

    def body(bb):
        t = bb.emit(relax.op.permute_dims(x, TO_NCHW))
        return relax.op.add(bb.emit(relax.op.nn.relu(t)), t)

    before = _function(x, body)
    tvm.ir.assert_structural_equal(sink_transposes(before), before)


def test_concat_pool_and_mean_follow_the_layout():
    """concat of two transposed branches, a max pool and a global mean all run in NHWC; one transpose is left
    where a real NCHW consumer needs it, none where the mean's result has no spatial axes left."""
    x = relax.Var("x", relax.TensorType((1, 8, 8, 4), "float32"))

    def body(bb):
        a = bb.emit(relax.op.permute_dims(bb.emit(relax.op.nn.relu(x)), TO_NCHW))
        b = bb.emit(relax.op.permute_dims(bb.emit(relax.op.sigmoid(x)), TO_NCHW))
        joined = bb.emit(relax.op.concat([a, b], axis=1))
        pooled = bb.emit(relax.op.nn.max_pool2d(joined, pool_size=3, strides=2, padding=1))
        return relax.op.mean(pooled, axis=[2, 3])

    before = _function(x, body)
    after = sink_transposes(before)
    assert _permutes(after) == []
    ops = []
    relax.analysis.post_order_visit(after["main"].body, lambda e: ops.append(e) if isinstance(e, relax.Call) else 0)
    pool = next(e for e in ops if e.op.name == "relax.nn.max_pool2d")
    assert str(pool.attrs.layout) == "NHWC" and int(next(e for e in ops if e.op.name == "relax.concat").attrs.axis) == 3
    data = RNG.standard_normal((1, 8, 8, 4)).astype("float32")
    np.testing.assert_allclose(_run(after, data), _run(before, data), rtol=1e-5, atol=1e-5)


def _inception_like(channels=8):
    """conv+bias -> relu -> (1x1 conv, 3x3 conv) -> concat -> dropout -> batch-norm as [C,1,1] mul/add -> relu
    -> max pool -> conv: what a held-out CNN gives ConvertLayout."""
    x = relax.Var("x", relax.TensorType((1, 3, 12, 12), "float32"))
    c = channels

    def body(bb):
        stem = relax.op.nn.conv2d(x, _const(c, 3, 3, 3), padding=1)
        y = bb.emit(relax.op.nn.relu(relax.op.add(stem, _const(1, c, 1, 1))))
        a = bb.emit(relax.op.nn.relu(relax.op.nn.conv2d(y, _const(c, c, 1, 1))))
        b = bb.emit(relax.op.nn.relu(relax.op.nn.conv2d(y, _const(c, c, 3, 3), padding=1)))
        joined = bb.emit(relax.op.concat([a, b], axis=1))
        kept = bb.emit(relax.TupleGetItem(bb.emit(relax.op.nn.dropout(joined, 0.5)), 0))
        bn = relax.op.add(relax.op.multiply(kept, _const(2 * c, 1, 1)), _const(2 * c, 1, 1))
        pooled = bb.emit(relax.op.nn.max_pool2d(bb.emit(relax.op.nn.relu(bn)), pool_size=2, strides=2))
        return relax.op.nn.conv2d(pooled, _const(c, 2 * c, 3, 3), padding=1)

    return _function(x, body)


@pytest.mark.parametrize("path", ["convert_layout", "one_by_one"])
def test_held_out_style_graph_keeps_only_entry_and_exit_transposes(path):
    """Both ways to NHWC (TVM's ConvertLayout once dropout is gone, or each conv on its own) end with one transpose
    into NHWC and one out, and compute what the NCHW graph computes."""
    before = _inception_like()
    mod = drop_dropout(before)
    if path == "convert_layout":
        converted = relax.transform.ConvertLayout({"relax.nn.conv2d": ["NHWC", "OHWI"]})(mod)
    else:
        converted = convs_to_nhwc_one_by_one(mod)
    assert len(_permutes(converted)) > 2
    after = sink_transposes(converted)
    assert _permutes(after) == [TO_NHWC, TO_NCHW]
    data = RNG.standard_normal((1, 3, 12, 12)).astype("float32")
    decompose = relax.transform.DecomposeOpsForInference()
    np.testing.assert_allclose(_run(after, data), _run(decompose(before), data), rtol=1e-4, atol=1e-4)


def test_dropout_alone_stops_convert_layout():
    """Why drop_dropout exists: TVM 0.27's ConvertLayout fails on the dropout's tuple, and succeeds without it."""
    mod = _inception_like()
    with pytest.raises(Exception, match="Expected nested to match tuple"):
        relax.transform.ConvertLayout({"relax.nn.conv2d": ["NHWC", "OHWI"]})(mod)
    relax.transform.ConvertLayout({"relax.nn.conv2d": ["NHWC", "OHWI"]})(drop_dropout(mod))


def _onnx_inception_like(path):
    """The same graph as ONNX (Conv, Relu, Concat, Dropout, Mul/Add by [C,1,1] initializers, MaxPool)."""
    from onnx import helper, numpy_helper

    c = 8
    weights = {
        "w0": (c, 3, 3, 3), "b0": (c,), "wa": (c, c, 1, 1), "wb": (c, c, 3, 3), "s": (2 * c, 1, 1),
        "t": (2 * c, 1, 1), "w1": (c, 2 * c, 3, 3),
    }  # fmt: skip
    inits = [numpy_helper.from_array(RNG.standard_normal(s).astype("float32"), n) for n, s in weights.items()]
    node = helper.make_node
    nodes = [
        node("Conv", ["x", "w0", "b0"], ["y0"], "stem", pads=[1] * 4),
        node("Relu", ["y0"], ["y"], "stem_relu"),
        node("Conv", ["y", "wa"], ["a0"], "branch_a"),
        node("Relu", ["a0"], ["a"], "branch_a_relu"),
        node("Conv", ["y", "wb"], ["b0_"], "branch_b", pads=[1] * 4),
        node("Relu", ["b0_"], ["b"], "branch_b_relu"),
        node("Concat", ["a", "b"], ["j"], "concat", axis=1),
        node("Dropout", ["j"], ["d"], "dropout"),
        node("Mul", ["d", "s"], ["m"], "scale"),
        node("Add", ["m", "t"], ["n"], "shift"),
        node("Relu", ["n"], ["r"], "relu"),
        node("MaxPool", ["r"], ["p"], "pool", kernel_shape=[2, 2], strides=[2, 2]),
        node("Conv", ["p", "w1"], ["out"], "head", pads=[1] * 4),
    ]
    return save_onnx(path, nodes, {"x": (1, 3, 12, 12)}, {"out": (1, c, 6, 6)}, inits)


def test_onnx_graph_with_dropout_builds_in_nhwc_with_two_transposes_and_matches_onnxruntime(tmp_path):
    from tuner.build.executable import build_prepared
    from tuner.core.target import resolve_target
    from tuner.frontend.onnx_model import prepare_model
    from tuner.fusion import get_strategy
    from tuner.plan import build_plan

    model = _onnx_inception_like(str(tmp_path / "inception_like.onnx"))
    prepared = prepare_model(model)
    built = build_prepared(prepared, resolve_target("llvm"), get_strategy("tvm"), layout="nhwc")
    assert built.layout == "nhwc" and not any(n.startswith("layout:") for n in prepared.notes), prepared.notes
    plan = build_plan(model, target="llvm", fusion="tvm", layout="nhwc")
    transposes = [g.name for g in plan.groups if "transpose" in g.name or "permute" in g.name]
    assert len(transposes) == 2, [g.name for g in plan.groups]  # into NHWC at the input, out at the output
    assert_matches_onnxruntime(built.executable, model, {"x": RNG.standard_normal((1, 3, 12, 12)).astype("float32")})


def _hard_swish_between_transposes(bb, x, exit_transpose=True):
    """permute to NCHW -> x * clip(x + 3, 0, 6) / 6 (ONNX's HardSwish as exporters decompose it: x read twice)
    -> the next conv's permute back to NHWC."""
    t = bb.emit(relax.op.permute_dims(x, TO_NCHW))
    gate = bb.emit(relax.op.clip(bb.emit(relax.op.add(t, relax.const(3.0)), "hs_add"), 0, 6), "hs_clip")
    y = bb.emit(relax.op.divide(bb.emit(relax.op.multiply(t, gate), "hs_mul"), relax.const(6.0)), "hs_div")
    return relax.op.permute_dims(y, TO_NHWC) if exit_transpose else y


def test_a_transpose_read_twice_moves_when_its_readers_join_again():
    """x * f(x) between a conv's transpose and the next conv's inverse: each reader takes a copy, the copies meet
    at the multiply, and the pair cancels (was: both transposes left, the activation a kernel of its own)."""
    x = relax.Var("x", relax.TensorType((1, 5, 5, 4), "float32"))
    before = _function(x, lambda bb: _hard_swish_between_transposes(bb, x))
    expected = _function(
        x,
        lambda bb: relax.op.divide(
            bb.emit(relax.op.multiply(x, bb.emit(relax.op.clip(bb.emit(relax.op.add(x, relax.const(3.0))), 0, 6)))),
            relax.const(6.0),
        ),
    )
    after = sink_transposes(before)
    tvm.ir.assert_structural_equal(after, expected)
    # each op keeps its binding's name, the ONNX node the plan and the profile attribute it to (the last one
    # takes the function's output, which the cancelled transpose had)
    names = {b.value.op.name: b.var.name for b in after["main"].body.blocks[0].bindings}
    assert names == {"relax.add": "hs_add", "relax.clip": "hs_clip", "relax.multiply": "hs_mul", "relax.divide": "gv"}
    data = RNG.standard_normal((1, 5, 5, 4)).astype("float32")
    np.testing.assert_allclose(_run(after, data), _run(before, data), rtol=1e-6)


def test_copies_of_a_shared_transpose_are_not_kept_when_they_add_one():
    """A reader that cannot move the transpose (a reshape) keeps the original; the relu's copy would be a second."""
    x = relax.Var("x", relax.TensorType((1, 5, 5, 4), "float32"))

    def body(bb):
        t = bb.emit(relax.op.permute_dims(x, TO_NCHW))
        return relax.op.add(bb.emit(relax.op.nn.relu(t)), bb.emit(relax.op.reshape(t, (1, 4, 5, 5))))

    before = _function(x, body)
    tvm.ir.assert_structural_equal(sink_transposes(before), before)


def test_a_second_pass_that_fails_leaves_the_first_passs_graph(monkeypatch):
    """The shared pass is an optimisation over a correct graph: if it raises on some graph, the build keeps what
    the single-reader pass made instead of failing."""
    from tuner.transform import transpose_sinking

    x = relax.Var("x", relax.TensorType((1, 5, 5, 4), "float32"))
    before = _function(x, lambda bb: _hard_swish_between_transposes(bb, x))
    single_pass = transpose_sinking._sink

    def failing_second_pass(func, shared):
        if shared:
            raise RuntimeError("a graph the second pass cannot take")
        return single_pass(func, shared)

    monkeypatch.setattr(transpose_sinking, "_sink", failing_second_pass)
    after = sink_transposes(before)
    assert len(_permutes(after)) == 2  # nothing moved: both transposes stay, as before the second pass existed
