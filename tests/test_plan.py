"""Fusion plan: exact group membership on small graphs, reasons on boundaries, JSON and SVG outputs."""

import json
import shutil

import pytest
from conftest import run_cli

from tuner.commands.compile import compile_model
from tuner.plan import build_plan


def test_cnn_groups_conv_act_with_bn_folded(cnn):
    plan = build_plan(cnn, target="llvm", fusion="tvm", layout="nchw")  # ONNX's layout: no transposes
    groups = [g.onnx_nodes for g in plan.groups]
    # batch-norms are folded into their convs before fusion (as ONNX Runtime does)
    assert groups[0] == ["stem/conv", "stem/relu"]
    assert groups[1] == ["block1/conv", "block1/relu", "block1/residual"]
    assert ["block2/conv", "block2/relu6"] in groups
    assert ["pool"] in groups and ["softmax"] in groups
    # every ONNX node appears in exactly one kernel
    flat = [n for g in groups for n in g]
    assert len(flat) == len(set(flat))
    assert plan.groups[0].intermediate_bytes == 2 * 16 * 32 * 32 * 4  # conv, +bias: two 64 KB stay in-kernel


@pytest.mark.parametrize("fusion", ["patterns", "tvm", "none"])
def test_mobilenet_block_maps_every_kernel_to_onnx_nodes(models_dir, fusion):
    """Issue 16, defect 13: on Conv+BN+HardSwish and squeeze-excitation blocks `patterns` mapped no kernel to a
    node (a residual pattern took HardSwish's `+ 3`, and a two-output group lost the data flow after it)."""
    plan = build_plan(str(models_dir / "mobilenet_block.onnx"), target="llvm", fusion=fusion, layout="nchw")
    groups = [g.onnx_nodes for g in plan.groups]
    assert all(groups), groups
    flat = [n for g in groups for n in g]
    folded = {"expand/bn", "dw/bn", "project/bn"}  # into their convs, before fusion (the plan's notes say so)
    assert any("BatchNormalization folded" in n for n in plan.notes)
    import onnx

    nodes = {n.name for n in onnx.load(str(models_dir / "mobilenet_block.onnx")).graph.node}
    assert set(flat) == nodes - folded
    if fusion != "none":
        assert ["expand/conv", "expand/hswish"] in groups and ["dw/conv", "dw/hswish"] in groups
        assert ["project/conv", "residual"] in groups


def test_transformer_attention_and_layernorm_groups(transformer):
    plan = build_plan(transformer, target="llvm", fusion="tvm")
    groups = [g.onnx_nodes for g in plan.groups]
    assert ["attn/scores", "attn/scale", "attn/mask"] in groups
    assert ["ln1/var", "ln1/add_eps", "ln1/sqrt", "ln1/normalize", "ln1/scale", "ln1/shift"] in groups
    assert [
        "ffn/fc1/matmul",
        "ffn/fc1/bias",
        "ffn/gelu/div",
        "ffn/gelu/erf",
        "ffn/gelu/add",
        "ffn/gelu/mul",
        "ffn/gelu/half",
    ] in groups
    reasons = {b.reason for b in plan.boundaries}
    assert "output has 2 consumers" in reasons


def test_unfused_plan_counts_match_the_build(cnn, tmp_path):
    none = build_plan(cnn, target="llvm", fusion="none")
    tvm = build_plan(cnn, target="llvm", fusion="tvm")
    _, m_none = compile_model(cnn, str(tmp_path / "n.ftpkg"), target="llvm", fusion="none")
    _, m_tvm = compile_model(cnn, str(tmp_path / "t.ftpkg"), target="llvm", fusion="tvm")
    assert none.kernels == m_none["kernels"] and tvm.kernels == m_tvm["kernels"]
    assert none.summary()["kernels_before"] == none.kernels
    assert tvm.summary()["launches_saved"] == m_none["kernels"] - m_tvm["kernels"]
    assert all(b.reason == "fusion disabled (strategy none)" for b in none.boundaries)
    assert all(len(g.members) == 1 for g in none.groups)


def test_plan_cli_json_and_svg(cnn, tmp_path):
    if not shutil.which("dot"):
        pytest.fail("Graphviz `dot` is missing: scripts/setup.sh installs it")
    svg = tmp_path / "plan.svg"
    r = run_cli("plan", cnn, "--target", "llvm", "--json", "--svg", str(svg))  # --json alone: to stdout
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["strategy"] == "tvm" and doc["kernels"] == len([g for g in doc["groups"] if g["launched"]])
    assert {"name", "onnx_nodes", "ops"} <= set(doc["groups"][0]) and all("reason" in b for b in doc["boundaries"])
    text = svg.read_text()
    assert text.lstrip().startswith("<?xml") and "stem/relu" in text and "cluster" in text
    import onnx

    graph_input = onnx.load(cnn).graph.input[0].name
    assert f"<title>input:{graph_input}</title>" in text  # the model's input is drawn, feeding its first kernel


def test_plan_table_names_kernels_by_onnx_ops_and_nodes(cnn, tmp_path):
    r = run_cli("plan", cnn, "--target", "llvm", "--json", str(tmp_path / "p.json"))
    assert r.returncode == 0, r.stderr
    doc = json.loads((tmp_path / "p.json").read_text())
    assert "Conv+Relu+Add" in r.stdout and "fused_conv2d" not in r.stdout  # ONNX words; TVM's names with -v
    assert "KiB" in r.stdout and " KB" not in r.stdout
    verbose = run_cli("plan", cnn, "--target", "llvm", "-v")
    assert doc["groups"][0]["name"] in verbose.stdout
    quiet = run_cli("plan", cnn, "--target", "llvm", "-q")
    assert quiet.returncode == 0 and quiet.stdout.strip() == ""


def test_plan_unknown_strategy(cnn):
    r = run_cli("plan", cnn, "--fusion", "greedy")
    assert r.returncode == 2 and "known strategies" in r.stderr


def test_horizontal_merges_qkv_and_stays_correct(transformer, cnn, tmp_path):
    from tuner.commands.run import run_package

    tvm_plan = build_plan(transformer, target="llvm", fusion="tvm")
    h_plan = build_plan(transformer, target="llvm", fusion="horizontal")
    assert h_plan.kernels < tvm_plan.kernels  # three Q/K/V MatMul+bias kernels became one
    names = [g.name for g in h_plan.groups]
    assert sum("matmul" in n for n in names) == sum("matmul" in n for n in (g.name for g in tvm_plan.groups)) - 2
    # provenance survives the merge: the wide MatMul names all three projections, the heads after the split
    # are traced to their own branch, and only the split the pass added has no ONNX node
    merged = next(g for g in h_plan.groups if "attn/k/matmul" in g.onnx_nodes)
    assert {"attn/q/matmul", "attn/k/matmul", "attn/v/matmul", "attn/q/bias", "attn/v/bias"} <= set(merged.onnx_nodes)
    assert [g.name for g in h_plan.groups if not g.onnx_nodes] == ["split"]
    assert ["attn/v/split_heads", "attn/v/transpose"] in [g.onnx_nodes for g in h_plan.groups]
    assert any(b.consumer == "split" and "split back into 3" in b.reason for b in h_plan.boundaries)
    out = str(tmp_path / "h.ftpkg")
    compile_model(transformer, out, target="llvm", fusion="horizontal")
    assert run_package(out, verify=transformer, repeat=1)["verify"]["ok"]
    # nothing parallel in the CNN: same kernels as tvm
    assert (
        build_plan(cnn, target="llvm", fusion="horizontal").kernels
        == build_plan(cnn, target="llvm", fusion="tvm").kernels
    )


def _split_and_heads_model(path):
    """YOLO's C2f and detection heads in miniature: a Split whose halves feed convs, and two convs with different
    output channels reading one tensor. Data-flow matching lost both (YOLOv8n: 89 of 94 kernels unattributed)."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    shapes = {"w0": (16, 3, 3, 3), "wa": (8, 8, 3, 3), "wbox": (4, 16, 1, 1), "wcls": (6, 16, 1, 1)}
    inits = [numpy_helper.from_array(rng.standard_normal(s).astype("float32"), n) for n, s in shapes.items()]
    inits.append(numpy_helper.from_array(np.array([8, 8], "int64"), "halves"))
    node = helper.make_node
    nodes = [
        node("Conv", ["x", "w0"], ["y0"], "stem", pads=[1] * 4),
        node("Relu", ["y0"], ["y"], "stem_act"),
        node("Split", ["y", "halves"], ["a", "b"], "split", axis=1),
        node("Conv", ["b", "wa"], ["b1"], "bottleneck", pads=[1] * 4),
        node("Relu", ["b1"], ["b2"], "bottleneck_act"),
        node("Concat", ["a", "b2"], ["c"], "concat", axis=1),
        node("Conv", ["c", "wbox"], ["box"], "head_box"),
        node("Conv", ["c", "wcls"], ["cls"], "head_cls"),
    ]
    out = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, k, 8, 8]) for n, k in (("box", 4), ("cls", 6))]
    graph = helper.make_graph(
        nodes, "split_heads", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])], out, inits
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    return path


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_split_outputs_and_shared_inputs_keep_their_onnx_nodes(tmp_path, layout):
    plan = build_plan(_split_and_heads_model(str(tmp_path / "m.onnx")), target="llvm", fusion="tvm", layout=layout)
    groups = [g.onnx_nodes for g in plan.groups]
    assert all(groups), [(g.name, g.onnx_nodes) for g in plan.groups]
    flat = {n for g in groups for n in g}
    assert {"bottleneck", "bottleneck_act", "head_box", "head_cls"} <= flat
    assert any(g[0] == "head_box" for g in groups) and any(g[0] == "head_cls" for g in groups)
    if layout == "nhwc":  # each output's transpose back to NCHW belongs to the conv it reads
        back = [g.onnx_nodes for g in plan.groups if g.name.startswith("transpose")][-2:]
        assert back == [["head_box"], ["head_cls"]], back


def test_onnxruntime_rows_reach_the_kernel_of_their_nodes():
    """ONNX Runtime renames nodes it rewrites: a ':0' or '_nchwc' suffix, a fused node named after its first member
    plus the fusion ('/model.0/act/Mul/QuickGeluFusion/': YOLOv8n's SiLU), or only the tensor it outputs."""
    from tuner.plan.attribution import onnxruntime_by_kernel

    kernels = {"k_conv": ["/m0/conv/Conv", "/m0/act/Sigmoid", "/m0/act/Mul"], "k_head": ["head"]}
    rows = [
        {"name": "/m0/conv/Conv_nchwc", "op": "Conv", "ms": 1.0},
        {"name": "/m0/act/Mul/QuickGeluFusion/", "op": "QuickGelu", "ms": 0.25},
        {"name": "head:0", "op": "Conv", "ms": 0.5},
        {"name": "renamed_by_output", "op": "Conv", "ms": 0.125},
        {"name": "ReorderInput_token_17", "op": "ReorderInput", "ms": 0.0625},
    ]
    per_kernel, unmatched = onnxruntime_by_kernel(kernels, rows, {"renamed_by_output": ["head"]})
    assert per_kernel == {"k_conv": 1.25, "k_head": 0.625}
    assert [r["name"] for r in unmatched] == ["ReorderInput_token_17"]


def test_a_node_in_two_kernels_goes_to_the_longer_one_and_a_conv_past_its_transposes():
    """A Gemm whose bias FuseOps put into the residual add after it is held by both kernels (BERT-base read
    43.6 ms of ONNX Runtime beside a 0.45 ms add); a conv's node is held by the layout transposes around it too."""
    from types import SimpleNamespace as NS

    from tuner.plan.attribution import in_ownership_order, onnxruntime_by_kernel

    def kernel(primfunc, op):
        return [NS(members=[NS(primfunc=primfunc, onnx_op=op, merged=[])])]

    groups = {
        "fused_matmul": kernel("matmul", "Gemm"),
        "fused_reshape_add": kernel("reshape", "Gemm"),
        "transpose": kernel("transpose", "Conv"),
        "fused_conv2d": kernel("conv2d", "Conv"),
    }
    nodes = {"fused_matmul": ["dense"], "fused_reshape_add": ["dense"], "transpose": ["conv"], "fused_conv2d": ["conv"]}
    ms = {"fused_matmul": 4.0, "fused_reshape_add": 0.04, "transpose": 0.5, "fused_conv2d": 0.1}
    rows = [{"name": "dense", "op": "Gemm", "ms": 3.5}, {"name": "conv", "op": "Conv", "ms": 0.2}]
    for order in (groups, dict(reversed(groups.items()))):
        by_kernel = {k: nodes[k] for k, _ in in_ownership_order(order, ms)}
        assert onnxruntime_by_kernel(by_kernel, rows)[0] == {"fused_matmul": 3.5, "fused_conv2d": 0.2}


def test_openvino_rows_reach_the_kernel_of_the_first_node_they_fused():
    """OpenVINO names a fused node after one of its own transformations (`Multiply_13928`, a folded batch-norm) and
    lists the model's nodes it fused; a row goes to the kernel of the first listed node any kernel holds, and a
    kernel whose nodes onnxsim renamed is found through the names it stands for (node_names.source_names)."""
    from tuner.frontend.node_names import source_names
    from tuner.plan.attribution import fused_nodes_by_kernel

    kernels = {"k_conv": ["p2o.Conv.14", "p2o.Add.194"], "k_fc": ["p2o.MatMul.24+p2o.Add.276 [Gemm]"]}
    kernels = {k: [s for n in nodes for s in source_names(n)] for k, nodes in kernels.items()}
    rows = [
        {"name": "Multiply_13928", "op": "Convolution", "ms": 1.0, "sources": ["Multiply_13928", "p2o.Add.194"]},
        {"name": "p2o.Add.276", "op": "FullyConnected", "ms": 0.5, "sources": ["p2o.Add.276"]},
        {"name": "softmax_11.tmp_0", "op": "Softmax", "ms": 0.25, "sources": ["softmax_11.tmp_0"]},
    ]
    per_kernel, unmatched = fused_nodes_by_kernel(kernels, rows)
    assert per_kernel == {"k_conv": 1.0, "k_fc": 0.5}
    assert [r["name"] for r in unmatched] == ["softmax_11.tmp_0"]


def test_a_deep_plan_is_drawn_in_columns_read_left_to_right(tmp_path):
    """A 120-kernel chain is not one column tens of thousands of points tall: it wraps into columns whose edges
    between columns do not constrain ranks, and the columns' first nodes sit on one row in order."""
    import re

    from tuner.plan.model import FusionPlan, Group, Member
    from tuner.plan.render import COLUMN_RANKS, render_svg, to_dot

    groups = []
    for k in range(120):
        m = Member(f"v{k}", f"relu{k}", "elemwise", f"/block{k}/Relu", "Relu", 4096, 1024.0)
        groups.append(Group(f"relu{k}", f"v{k}", [m], [f"v{k - 1}" if k else "x"], 4096, 4096, 0))
    plan = FusionPlan("chain.onnx", "tvm", "llvm", groups, boundaries=[], unfused_kernels=120)
    dot = to_dot(plan)
    crossing = dot.count("constraint=false")
    assert crossing == -(-120 // COLUMN_RANKS) - 1  # one edge per column break
    heads = re.search(r"\{ rank=same; (.*?) \}", dot).group(1)
    assert heads.split('" "')[0].strip('"') == "/block0/Relu"  # the input's column first
    if shutil.which("dot"):
        svg = tmp_path / "deep.svg"
        render_svg(plan, str(svg))
        size = re.search(r'width="([\d.]+)pt" height="([\d.]+)pt"', svg.read_text())
        width, height = float(size.group(1)), float(size.group(2))
        assert height < 3000 and width > 600, (width, height)  # one column: ~9,000 pt tall
