"""Recurrent converters end to end: a CRNN-style model (convolutions, then a bidirectional LSTM, then a
classifier) imports, fuses, builds and matches ONNX Runtime, and the plan shows the recurrent cell's kernels."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tuner.commands.compile import compile_model
from tuner.plan import build_plan
from tuner.runtime import load


def _crnn(path, cell="LSTM", seq=12, hidden=8):
    rng = np.random.default_rng(0)

    def w(name, *shape):
        return numpy_helper.from_array((0.3 * rng.standard_normal(shape)).astype("float32"), name)

    gates = {"LSTM": 4, "GRU": 3, "RNN": 1}[cell]
    feat = 4 * 6
    nodes = [
        helper.make_node("Conv", ["x", "cw", "cb"], ["c"], name="conv", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("Reshape", ["r", "flat"], ["f"], name="to_sequence"),  # [1, 24, seq]
        helper.make_node("Transpose", ["f"], ["s"], name="time_major", perm=[2, 0, 1]),  # [seq, 1, 24]
        helper.make_node(cell, ["s", "W", "R", "B"], ["y"], name="rnn", hidden_size=hidden, direction="bidirectional"),
        helper.make_node("Transpose", ["y"], ["yt"], name="dirs_last", perm=[0, 2, 1, 3]),  # [seq, 1, 2, H]
        helper.make_node("Reshape", ["yt", "feat"], ["yf"], name="merge_dirs"),  # [seq, 1, 2H]
        helper.make_node("MatMul", ["yf", "head"], ["logits"], name="classifier"),
    ]
    graph = helper.make_graph(
        nodes,
        "crnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 6, seq])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [seq, 1, 10])],
        [
            w("cw", 4, 1, 3, 3),
            w("cb", 4),
            numpy_helper.from_array(np.array([1, feat, seq], "int64"), "flat"),
            w("W", 2, gates * hidden, feat),
            w("R", 2, gates * hidden, hidden),
            w("B", 2, 2 * gates * hidden),
            numpy_helper.from_array(np.array([seq, 1, 2 * hidden], "int64"), "feat"),
            w("head", 2 * hidden, 10),
        ],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return path


@pytest.mark.parametrize("cell", ["LSTM", "GRU", "RNN"])
def test_crnn_builds_and_matches_onnxruntime(tmp_path, cell):
    from tuner.commands.run import verify_against_onnx

    path = _crnn(str(tmp_path / "crnn.onnx"), cell)
    out = str(tmp_path / "crnn.ftpkg")
    compile_model(path, out, target="llvm")
    model = load(out)
    feed = model.random_inputs()
    v = verify_against_onnx(model, feed, model(**feed), path)
    assert v["ok"], v


def test_lstm_plan_shows_the_cell_fused_per_step(tmp_path):
    seq = 4
    plan = build_plan(_crnn(str(tmp_path / "crnn.onnx"), "LSTM", seq=seq), target="llvm", fusion="tvm")
    members = [[m.primfunc for m in g.members] for g in plan.groups]
    # per step and direction: the recurrent matmul with its bias adds as one kernel...
    steps = [g for g, ops in zip(plan.groups, members) if any(op.startswith("matmul1") for op in ops)]
    # (the first step's H is zero: FoldConstant removes its H·Rᵀ)
    assert len(steps) == 2 * (seq - 1) and all("rnn" in g.onnx_nodes for g in steps)
    # ...and the gate tail (slices, sigmoids, tanh, products) fused into kernels, not one launch per op
    tails = [ops for ops in members if any("sigmoid" in op or "tanh" in op for op in ops)]
    assert len(tails) >= 2 * seq and all(len(ops) >= 4 for ops in tails)
    # the whole-sequence input projection: one matmul per direction
    assert sum(ops[0] == "matmul" for ops in members) == 2
