"""patterns and cost: exact group membership on purpose-built graphs, refusals with reasons, and numerical
equivalence with ONNX Runtime for every strategy."""

import onnx
import pytest
from onnx import TensorProto, helper

from tuner.commands.compile import compile_model
from tuner.commands.run import run_package
from tuner.plan import build_plan


def _attention(path, seq):
    """scores = q @ k^T * scale + mask -> softmax -> @ v, with q, k, v graph inputs (activations, not weights)."""
    h, d = 2, 16
    nodes = [
        helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2], name="k_t"),
        helper.make_node("MatMul", ["q", "kt"], ["s"], name="scores"),
        helper.make_node("Mul", ["s", "scale"], ["ss"], name="scale"),
        helper.make_node("Add", ["ss", "mask"], ["sm"], name="mask"),
        helper.make_node("Softmax", ["sm"], ["p"], axis=-1, name="softmax"),
        helper.make_node("MatMul", ["p", "v"], ["y"], name="context"),
    ]
    f = TensorProto.FLOAT
    ins = [helper.make_tensor_value_info(n, f, [1, h, seq, d]) for n in ("q", "k", "v")]
    ins.append(helper.make_tensor_value_info("mask", f, [1, 1, seq, seq]))
    g = helper.make_graph(
        nodes,
        "attn",
        ins,
        [helper.make_tensor_value_info("y", f, [1, h, seq, d])],
        [helper.make_tensor("scale", f, [], [0.25])],
    )
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_patterns_group_attention_chain_and_layernorm(transformer):
    plan = build_plan(transformer, target="llvm", fusion="patterns")
    groups = [g.onnx_nodes for g in plan.groups]
    # the score chain and its product with V: two reductions behind the first, one kernel
    # exactly these nodes, no more (K's transpose is folded into the scores matmul by FuseTransposeMatmul)
    chain = {"attn/k_t", "attn/scores", "attn/scale", "attn/mask", "attn/softmax", "attn/context"}
    assert [set(g) for g in groups if "attn/scores" in g] == [chain]
    # residual Add + the whole decomposed LayerNorm (two means) in one kernel; tvm splits it in three
    ln = [
        "attn/residual",
        "ln1/mean",
        "ln1/center",
        "ln1/square",
        "ln1/var",
        "ln1/add_eps",
        "ln1/sqrt",
        "ln1/normalize",
        "ln1/scale",
        "ln1/shift",
    ]
    assert ln in groups
    tvm_groups = [g.onnx_nodes for g in build_plan(transformer, target="llvm", fusion="tvm").groups]
    assert ln not in tvm_groups
    assert plan.kernels < len([g for g in tvm_groups if g])


def test_patterns_conv_act_and_cycle_refusal(cnn):
    plan = build_plan(cnn, target="llvm", fusion="patterns")
    groups = [g.onnx_nodes for g in plan.groups]
    assert ["stem/conv", "stem/relu"] in groups  # batch-norms are folded into the convs before fusion
    assert ["block2/conv", "block2/relu6"] in groups  # Clip imported as relax clip
    # the residual Add after the stem would make a cycle with block1 (it consumes block1's output): refused
    assert any("would form a cycle" in n for n in plan.notes)
    # the classifier MatMul + bias + Softmax is not attention (K is a weight)
    assert any("K is a constant, not attention" in n for n in plan.notes)
    # NHWC on CPU: the model input's NCHW -> NHWC transpose is its own kernel, the cost of running stem/conv there
    layout = [g for g in plan.groups if g.name.startswith("transpose")]
    assert [g.onnx_nodes for g in layout] == [["stem/conv"]]
    flat = [n for g in plan.groups if g not in layout for n in g.onnx_nodes]
    assert len(flat) == len(set(flat))


def test_cost_refuses_a_score_matrix_that_does_not_fit(tmp_path, monkeypatch):
    from tuner.fusion import cost

    small = _attention(str(tmp_path / "small.onnx"), seq=16)  # 2 KiB of scores per head
    big = _attention(str(tmp_path / "big.onnx"), seq=2048)  # 32 MiB of scores: more than L2 x cores (≤ 8 MiB met)
    full = {"scores", "scale", "mask", "softmax", "context"}

    def fused(path, fusion="cost"):
        plan = build_plan(path, target="llvm", fusion=fusion)
        return any(full <= set(g.onnx_nodes) for g in plan.groups), [b.reason for b in plan.boundaries] + plan.notes

    # by default QK^T feeding softmax is refused whatever its size: MetaSchedule cannot tile that matmul
    ok, reasons = fused(small)
    assert not ok and any("cannot tile it there" in r for r in reasons)
    # allowed to fuse anchors into reductions, the rule still refuses what does not fit on chip
    unrestricted = cost.CostFusion(cost.CostKnobs(fuse_anchor_into_reduction=True))
    assert fused(small, unrestricted)[0]
    ok, reasons = fused(big, cost.CostFusion(cost.CostKnobs(fuse_anchor_into_reduction=True)))
    assert not ok and any("exceeds the on-chip budget" in r for r in reasons)
    # patterns fuses both regardless
    assert fused(big, "patterns")[0]


def test_cost_fuses_layernorm_which_tvm_splits(transformer):
    ln = [
        "attn/residual",
        "ln1/mean",
        "ln1/center",
        "ln1/square",
        "ln1/var",
        "ln1/add_eps",
        "ln1/sqrt",
        "ln1/normalize",
        "ln1/scale",
        "ln1/shift",
    ]
    plan = build_plan(transformer, target="llvm", fusion="cost")
    assert ln in [g.onnx_nodes for g in plan.groups]
    # provenance through FuseTransposeMatmul: the transpose of K is folded into the scores matmul
    assert ["attn/scores", "attn/k_t", "attn/scale", "attn/mask"] in [g.onnx_nodes for g in plan.groups]
    assert all(g.onnx_nodes for g in plan.groups)
    assert ln not in [g.onnx_nodes for g in build_plan(transformer, target="llvm", fusion="tvm").groups]


@pytest.mark.parametrize("fusion", ["patterns", "cost", "horizontal+patterns"])
def test_strategies_match_onnxruntime(fusion, cnn, transformer, mlp, tmp_path):
    for k, (model, shapes) in enumerate([(cnn, None), (transformer, None), (mlp, {"x": (2, 32)})]):
        out = str(tmp_path / f"{k}.ftpkg")
        compile_model(model, out, target="llvm", fusion=fusion, shapes=shapes)
        assert run_package(out, verify=model, repeat=1)["verify"]["ok"], (fusion, model)


def test_attention_fused_matches_onnxruntime(tmp_path):
    path = _attention(str(tmp_path / "a.onnx"), seq=16)
    for fusion in ("patterns", "cost"):  # patterns fuses the whole chain, cost splits it
        out = str(tmp_path / f"{fusion}.ftpkg")
        compile_model(path, out, target="llvm", fusion=fusion)
        assert run_package(out, verify=path, repeat=1)["verify"]["ok"]


def test_horizontal_says_when_there_is_nothing_to_merge(cnn, transformer):
    assert any("nothing to merge" in n for n in build_plan(cnn, target="llvm", fusion="horizontal").notes)
    assert not any("nothing to merge" in n for n in build_plan(transformer, target="llvm", fusion="horizontal").notes)
