"""A one-hot times constant weights becomes a row lookup (tuner/one_hot.py): structure, and numerics against ONNX
Runtime with indices outside the one-hot's range."""

import numpy as np
import onnx
import pytest
import tvm
from onnx import helper, numpy_helper
from tvm import relax

from tuner.transform.one_hot import one_hot_matmul_as_take

K, N = 6, 4


def _one_hot_matmul(arange, swap=False, index_shape=(2, 3, 1)):
    idx = relax.Var("idx", relax.TensorType(index_shape, "int32"))
    w = relax.const(np.arange(K * N, dtype="float32").reshape(K, N))
    bb = relax.BlockBuilder()
    with bb.function("main", [idx]):
        with bb.dataflow():
            c = relax.const(arange)
            hot = bb.emit(relax.op.equal(c, idx) if swap else relax.op.equal(idx, c))
            out = bb.emit_output(relax.op.matmul(bb.emit(relax.op.astype(hot, "float32")), w))
        bb.emit_func_output(out)
    return bb.get(), idx, w


def _ops(mod) -> list[str]:
    ops = []
    relax.analysis.post_order_visit(
        mod["main"].body, lambda e: ops.append(e.op.name) if isinstance(e, relax.Call) else None
    )
    return ops


@pytest.mark.parametrize("swap", [False, True])
def test_one_hot_against_arange_becomes_a_masked_take(swap):
    before, idx, w = _one_hot_matmul(np.arange(K, dtype="int32").reshape(1, 1, K), swap)
    bb = relax.BlockBuilder()
    with bb.function("main", [idx]):
        with bb.dataflow():
            rows = relax.op.astype(relax.op.squeeze(idx, [-1]), "int64")
            looked_up = relax.op.take(w, rows, axis=0, mode="clip")
            inside = relax.op.logical_and(
                relax.op.greater_equal(rows, relax.const(0, "int64")), relax.op.less(rows, relax.const(K, "int64"))
            )
            out = bb.emit_output(
                relax.op.multiply(looked_up, relax.op.expand_dims(relax.op.astype(inside, "float32"), -1))
            )
        bb.emit_func_output(out)
    after = relax.transform.DeadCodeElimination()(one_hot_matmul_as_take(before))
    tvm.ir.assert_structural_equal(relax.transform.Normalize()(after), relax.transform.Normalize()(bb.get()))


@pytest.mark.parametrize(
    "arange", [np.arange(1, K + 1, dtype="int32"), np.arange(K, dtype="int32")[::-1].copy(), np.zeros(K, "int32")]
)
def test_a_one_hot_not_against_arange_is_kept(arange):
    before, _, _ = _one_hot_matmul(arange)
    assert "relax.matmul" in _ops(one_hot_matmul_as_take(before))


def test_an_index_not_of_one_column_is_kept():
    # (2, K) == (K,) compares position by position: a mask, not a one-hot
    before, _, _ = _one_hot_matmul(np.arange(K, dtype="int32"), index_shape=(2, K))
    assert "relax.matmul" in _ops(one_hot_matmul_as_take(before))


def test_lookup_matches_onnxruntime_with_indices_out_of_range(tmp_path):
    """jax2tf's one-hot embedding (magika's first layer): Unsqueeze, Equal against a constant range, Cast, MatMul.
    Indices below 0 and at K or beyond give zero rows, as the one-hot does."""
    from tuner.commands.compile import compile_model
    from tuner.report.reference import compare_outputs, run_onnxruntime
    from tuner.runtime import load

    rng = np.random.default_rng(0)
    w = rng.standard_normal((K, N)).astype("float32")
    nodes = [
        helper.make_node("Unsqueeze", ["idx", "axes"], ["col"]),
        helper.make_node("Equal", ["col", "range"], ["hot"]),
        helper.make_node("Cast", ["hot"], ["hotf"], to=onnx.TensorProto.FLOAT),
        helper.make_node("MatMul", ["hotf", "w"], ["y"]),
    ]
    inits = [
        numpy_helper.from_array(np.array([-1], "int64"), "axes"),
        numpy_helper.from_array(np.arange(K, dtype="int32"), "range"),
        numpy_helper.from_array(w, "w"),
    ]
    graph = helper.make_graph(
        nodes,
        "one_hot",
        [helper.make_tensor_value_info("idx", onnx.TensorProto.INT32, [2, 5])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2, 5, N])],
        inits,
    )
    path = str(tmp_path / "one_hot.onnx")
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    out = str(tmp_path / "one_hot.ftpkg")
    _, manifest = compile_model(path, out, target="llvm")
    assert not any("matmul" in k for k in manifest["kernel_names"]), manifest["kernel_names"]
    idx = np.array([[0, 5, -1, 6, 3], [2, 100, -7, 1, 4]], "int32")
    ours = load(out)(idx)
    assert compare_outputs(ours, run_onnxruntime(path, {"idx": idx}))["ok"]
    assert np.all(ours["y"][0, 2] == 0) and np.all(ours["y"][0, 3] == 0)  # -1 and K: zero rows
