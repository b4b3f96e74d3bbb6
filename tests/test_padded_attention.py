"""PadAttentionKeys (tuner/transform/padded_attention.py): which attentions get their keys padded to whole
vectors, the graph after, the same numbers before and after, and a real build against ONNX Runtime."""

import numpy as np
import onnx
import pytest
import tvm
from onnx import TensorProto, helper, numpy_helper
from tvm import relax

from tuner.transform.padded_attention import MASKED, attention_note, pad_attention_keys, padded_attentions

AVX2 = 8  # fp32 lanes
RNG = np.random.default_rng(0)


def _attention(keys=197, heads=2, depth=8, scale=None, mask=False, axis=-1, return_probs=False, divide_by_keys=False):
    """main(q (1, heads, keys, depth), kt (1, heads, depth, keys), v (1, heads, keys, depth)[, m (1, 1, 1, keys)])
    -> softmax(q kt [* scale] [+ m], axis) v [, the probabilities]."""
    bb = relax.BlockBuilder()
    q = relax.Var("q", relax.TensorType([1, heads, keys, depth], "float32"))
    kt = relax.Var("kt", relax.TensorType([1, heads, depth, keys], "float32"))
    v = relax.Var("v", relax.TensorType([1, heads, keys, depth], "float32"))
    m = relax.Var("m", relax.TensorType([1, 1, 1, keys], "float32"))
    with bb.function("main", [q, kt, v, m] if mask else [q, kt, v]):
        with bb.dataflow():
            s = bb.emit(relax.op.matmul(q, kt), "scores")
            if scale is not None:
                s = bb.emit(relax.op.multiply(s, relax.const(scale, "float32")), "scaled")
            if mask:
                s = bb.emit(relax.op.add(s, m), "masked_by_model")
            if divide_by_keys:  # a per-key divisor: padded with zeros it would divide by zero
                s = bb.emit(relax.op.divide(s, relax.const(np.full((keys,), 2.0, "float32"))), "per_key")
            p = bb.emit(relax.op.nn.softmax(s, axis=axis), "probs")
            o = bb.emit(relax.op.matmul(p, v), "out")
            out = bb.emit_output(relax.Tuple([o, p]) if return_probs else o)
        bb.emit_func_output(out)
    return bb.get()


def _ops(mod) -> list[str]:
    names = []
    relax.analysis.post_order_visit(
        mod["main"],
        lambda e: names.append(e.op.name[6:]) if isinstance(e, relax.Call) and hasattr(e.op, "name") else None,
    )
    return names


def _run(mod, inputs):
    vm = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
    return vm["main"](*[tvm.runtime.tensor(x) for x in inputs]).numpy()


def _inputs(keys=197, heads=2, depth=8, mask=False):
    shapes = [(1, heads, keys, depth), (1, heads, depth, keys), (1, heads, keys, depth)]
    arrays = [RNG.standard_normal(s).astype("float32") for s in shapes]
    if mask:  # an attention mask as BERT writes it: 0 where attended, a large negative where not
        arrays.append(np.where(RNG.random((1, 1, 1, keys)) < 0.2, -10000.0, 0.0).astype("float32"))
    return arrays


def test_keys_are_padded_and_the_padding_masked_before_the_softmax():
    after = pad_attention_keys(_attention(), AVX2)
    assert _ops(after) == ["nn.pad", "matmul", "add", "nn.softmax", "nn.pad", "matmul"]
    assert padded_attentions(after) == {"197 -> 200": 1}
    assert (
        attention_note(padded_attentions(after))
        == "attention keys padded to whole vectors: 197 -> 200 in 1 softmax(es)"
    )
    func = after["main"]
    bound = {b.var.name: b.value for block in func.body.blocks for b in block.bindings}
    assert [int(d) for d in bound["scores"].ty.shape] == [1, 2, 197, 200]
    assert [int(d) for d in bound["out"].ty.shape] == [1, 2, 197, 8]  # the attention's result keeps its shape
    mask = bound["probs_masked"].args[1].value.numpy()
    assert (mask[:197] == 0).all() and (mask[197:] == np.float32(MASKED)).all()


@pytest.mark.parametrize("scale,mask", [(None, False), (0.125, False), (0.125, True)])
def test_the_padded_attention_computes_the_same_numbers(scale, mask):
    before = _attention(scale=scale, mask=mask)
    after = pad_attention_keys(before, AVX2)
    assert padded_attentions(after) == {"197 -> 200": 1}
    if mask:  # the model's own mask over the keys is padded with zeros, as the keys are
        assert _ops(after).count("nn.pad") == 3
    inputs = _inputs(mask=mask)
    np.testing.assert_allclose(_run(after, inputs), _run(before, inputs), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "what,kwargs",
    [
        ("keys a half vector divides", {"keys": 196}),
        ("the softmax over another axis", {"axis": 2}),
        ("the probabilities also returned", {"return_probs": True}),
        ("keys fewer than a vector", {"keys": 5}),
        ("a divisor over the keys", {"divide_by_keys": True}),
    ],
)
def test_what_stays_as_it_was(what, kwargs):
    before = _attention(**kwargs)
    after = pad_attention_keys(before, AVX2)
    assert after is before, what


def _vit_attention(tokens=197, width=32, heads=2):
    """x (1, tokens, width) -> one self-attention as an exporter writes it: projections, heads split by reshape and
    transpose, scores scaled by 1/sqrt(depth), softmax, values, heads merged."""
    depth = width // heads
    inits = [
        numpy_helper.from_array(RNG.standard_normal((width, width)).astype("float32") * 0.2, name)
        for name in ("wq", "wk", "wv")
    ]
    inits += [
        numpy_helper.from_array(np.array([1, tokens, heads, depth], "int64"), "split"),
        numpy_helper.from_array(np.array([1, tokens, width], "int64"), "merge"),
        numpy_helper.from_array(np.array(depth**-0.5, "float32"), "scale"),
    ]
    nodes = []
    for name in ("q", "k", "v"):
        nodes += [
            helper.make_node("MatMul", ["x", f"w{name}"], [f"{name}_flat"]),
            helper.make_node("Reshape", [f"{name}_flat", "split"], [f"{name}_split"]),
        ]
    nodes += [
        helper.make_node("Transpose", ["q_split"], ["q"], perm=[0, 2, 1, 3]),
        helper.make_node("Transpose", ["k_split"], ["kt"], perm=[0, 2, 3, 1]),
        helper.make_node("Transpose", ["v_split"], ["v"], perm=[0, 2, 1, 3]),
        helper.make_node("MatMul", ["q", "kt"], ["scores"]),
        helper.make_node("Mul", ["scores", "scale"], ["scaled"]),
        helper.make_node("Softmax", ["scaled"], ["probs"], axis=-1),
        helper.make_node("MatMul", ["probs", "v"], ["heads"]),
        helper.make_node("Transpose", ["heads"], ["merged"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["merged", "merge"], ["out"]),
    ]
    graph = helper.make_graph(
        nodes,
        "vit_attention",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, tokens, width])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, tokens, width])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_padded_attention_computes_what_onnx_runtime_computes_and_says_so(tmp_path):
    """Through compile (said in the package's preparation notes and the plan), and the package matches ONNX
    Runtime."""
    ort = pytest.importorskip("onnxruntime")
    import tuner
    from tuner.commands.compile import compile_model
    from tuner.plan.provenance import build_plan

    path = str(tmp_path / "vit_attention.onnx")
    onnx.save(_vit_attention(), path)
    package = str(tmp_path / "m.ftpkg")
    _, manifest = compile_model(path, package, target="llvm:znver3")
    note = "attention keys padded to whole vectors: 197 -> 200 in 1 softmax(es)"
    assert note in manifest["preparation"], manifest["preparation"]
    model = tuner.load(package)
    x = np.random.default_rng(3).standard_normal((1, 197, 32)).astype("float32")
    expected = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(model(x=x)["out"], expected, rtol=1e-4, atol=1e-4)
    plan = build_plan(path, target="llvm:znver3")
    assert note in plan.notes
    ops = {m.onnx_op for g in plan.groups if g.launched for m in g.members}
    assert {"MatMul", "Softmax", "Transpose"} <= ops, ops
