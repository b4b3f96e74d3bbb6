"""Recurrent converters end to end: a CRNN-style model (convolutions, then a bidirectional LSTM, then a
classifier) imports, fuses, builds and matches ONNX Runtime; on CPU each recurrent op is one sequence kernel
(tuner/frontend/converters/recurrent_sequence.py), elsewhere or where that kernel does not apply the steps are
unrolled, and the plan shows which."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tuner.commands.compile import compile_model
from tuner.plan import build_plan
from tuner.runtime import load


def _crnn(path, cell="LSTM", seq=12, hidden=8, **cell_attrs):
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
        helper.make_node(
            cell, ["s", "W", "R", "B"], ["y"], name="rnn", hidden_size=hidden, direction="bidirectional", **cell_attrs
        ),
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


@pytest.mark.parametrize("cell,attrs", [("LSTM", {}), ("GRU", {}), ("GRU", {"linear_before_reset": 1}), ("RNN", {})])
def test_crnn_builds_and_matches_onnxruntime(tmp_path, cell, attrs):
    from tuner.commands.run import verify_against_onnx

    path = _crnn(str(tmp_path / "crnn.onnx"), cell, **attrs)
    out = str(tmp_path / "crnn.ftpkg")
    compile_model(path, out, target="llvm")
    model = load(out)
    feed = model.random_inputs()
    v = verify_against_onnx(model, feed, model(**feed), path)
    assert v["ok"], v


def _kernels_of(plan, node):
    return [[m.primfunc for m in g.members] for g in plan.groups if node in g.onnx_nodes and g.launched]


@pytest.mark.parametrize("cell,attrs", [("LSTM", {}), ("GRU", {"linear_before_reset": 1}), ("GRU", {}), ("RNN", {})])
def test_cpu_plan_runs_the_whole_sequence_in_one_kernel(tmp_path, cell, attrs):
    plan = build_plan(_crnn(str(tmp_path / "crnn.onnx"), cell, seq=6, **attrs), target="llvm", fusion="tvm")
    kernels = _kernels_of(plan, "rnn")
    # both directions' input projection as one matmul (biases in its epilogue), then one kernel for every step
    sequence = [ops for ops in kernels if any(op.startswith(f"{cell.lower()}_sequence") for op in ops)]
    assert len(sequence) == 1 and len(sequence[0]) == 1, kernels
    assert sum(any(op.startswith("matmul") for op in ops) for ops in kernels) == 1, kernels
    assert len(kernels) <= 3, kernels  # (the packed recurrent weights fold into constants: no kernel)


@pytest.mark.parametrize(
    "cell,attrs,precision",
    [
        ("RNN", {"activations": ["Relu", "Relu"]}, None),
        ("LSTM", {"clip": 2.0}, None),
        ("LSTM", {"activations": ["Sigmoid", "Tanh", "Relu"] * 2}, None),
        # TVM's mixed-precision pass cannot retype a hand-written kernel's call
        ("LSTM", {}, "float16"),
    ],
)
def test_what_the_sequence_kernel_cannot_run_stays_unrolled(tmp_path, cell, attrs, precision):
    path = _crnn(str(tmp_path / "rnn.onnx"), cell, seq=4, **attrs)
    plan = build_plan(path, target="llvm", fusion="tvm", precision=precision)
    kernels = _kernels_of(plan, "rnn")
    assert not any("sequence" in op for ops in kernels for op in ops) and len(kernels) > 8, kernels


@pytest.mark.parametrize("cell,lbr", [("LSTM", 0), ("GRU", 1), ("GRU", 0), ("RNN", 0)])
def test_sequence_kernel_batch_major_with_initial_states(tmp_path, cell, lbr):
    """layout=1 (batch first), batch 3, initial states fed at run time, a hidden size that is not a whole number
    of vectors (20: blocks of 10 units), a forward and a reverse direction, against ONNX's reference evaluator
    (ONNX Runtime refuses layout=1)."""
    from onnx.reference import ReferenceEvaluator

    rng = np.random.default_rng(1)
    gates, seq, batch, feat, hidden = {"LSTM": 4, "GRU": 3, "RNN": 1}[cell], 7, 3, 5, 20
    inputs = ["x", "W", "R", "B", "", "h0"] + (["c0"] if cell == "LSTM" else [])
    attrs = {"linear_before_reset": lbr} if cell == "GRU" else {}
    node = helper.make_node(
        cell, inputs, ["y", "y_h"], hidden_size=hidden, direction="bidirectional", layout=1, **attrs
    )

    def w(name, *shape):
        return numpy_helper.from_array((0.4 * rng.standard_normal(shape)).astype("float32"), name)

    states = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [batch, 2, hidden]) for n in inputs[5:]]
    graph = helper.make_graph(
        [node],
        "batch_major",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, seq, feat])] + states,
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, seq, 2, hidden]),
            helper.make_tensor_value_info("y_h", TensorProto.FLOAT, [batch, 2, hidden]),
        ],
        [w("W", 2, gates * hidden, feat), w("R", 2, gates * hidden, hidden), w("B", 2, 2 * gates * hidden)],
    )
    path = str(tmp_path / "batch_major.onnx")
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)], ir_version=8), path)
    out = str(tmp_path / "batch_major.ftpkg")
    compile_model(path, out, target="llvm")
    model = load(out)
    feed = model.random_inputs()
    got, want = model(**feed), ReferenceEvaluator(path).run(None, feed)
    for g, w_ in zip(got.values() if isinstance(got, dict) else got, want):
        np.testing.assert_allclose(np.asarray(g), w_, rtol=1e-4, atol=1e-5)


def test_gpu_plan_unrolls_the_cell_per_step(tmp_path):
    seq = 4
    plan = build_plan(_crnn(str(tmp_path / "crnn.onnx"), "LSTM", seq=seq), target="cuda:sm_80", fusion="tvm")
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


@pytest.mark.parametrize(
    "cell,attrs", [("LSTM", {}), ("GRU", {"linear_before_reset": 1}), ("GRU", {}), ("RNN", {"direction": "reverse"})]
)
def test_one_direction_and_batch_row_splits_each_step_over_the_threads(tmp_path, cell, attrs):
    """Batch 1, one direction: the step's unit blocks run in parallel (the kernel's loop over them is the parallel
    one), against ONNX Runtime. GRU without linear_before_reset keeps one thread (r·H of every unit comes first)."""
    from tuner.commands.run import verify_against_onnx
    from tuner.frontend.converters.recurrent_sequence import SequenceShape, sequence_kernel

    rng = np.random.default_rng(2)
    gates, seq, feat, hidden = {"LSTM": 4, "GRU": 3, "RNN": 1}[cell], 9, 6, 64
    node = helper.make_node(cell, ["x", "W", "R", "B"], ["y"], hidden_size=hidden, **attrs)

    def w(name, *shape):
        return numpy_helper.from_array((0.3 * rng.standard_normal(shape)).astype("float32"), name)

    graph = helper.make_graph(
        [node],
        "one_row",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [seq, 1, feat])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [seq, 1, 1, hidden])],
        [w("W", 1, gates * hidden, feat), w("R", 1, gates * hidden, hidden), w("B", 1, 2 * gates * hidden)],
    )
    path = str(tmp_path / "one_row.onnx")
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)], ir_version=8), path)
    out = str(tmp_path / "one_row.ftpkg")
    compile_model(path, out, target="llvm")
    model = load(out)
    feed = model.random_inputs()
    v = verify_against_onnx(model, feed, model(**feed), path)
    assert v["ok"], v
    split = cell != "GRU" or bool(attrs)
    shape = SequenceShape(cell, seq, 1, hidden, (False,), 32, bool(attrs.get("linear_before_reset")), split_units=split)
    loops = [n for n in sequence_kernel(shape).script().splitlines() if "T.parallel" in n]
    assert len(loops) == 1 and ("for nb in" in loops[0]) == split, loops
