"""PadRegisterBlocks (tuner/schedule/padded_blocks.py): which rows and columns are padded, the kernel before and
after, what is left alone, and the numbers through a real build against ONNX Runtime."""

import numpy as np
import onnx
import pytest
import tvm
from onnx import TensorProto, helper, numpy_helper
from tvm.script import tirx as T

from tuner.core.register_blocks import column_multiple, row_multiple
from tuner.schedule.padded_blocks import (
    PADDED_ATTR,
    pad_kernel,
    pad_register_blocks,
    padded_kernels,
)

AVX2 = {"lanes": 8, "registers": 16}  # rows beside two vectors: 6


@T.prim_func(s_tir=True)
def matmul_97_rows(A: T.Buffer((97, 16), "float32"), W: T.Buffer((16, 8), "float32"), C: T.Buffer((97, 8), "float32")):
    T.func_attr({"layout_free_buffers": [1]})
    for i, j, k in T.grid(97, 8, 16):
        with T.sblock("matmul"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = T.float32(0)
            C[vi, vj] = C[vi, vj] + A[vi, vk] * W[vk, vj]


@T.prim_func(s_tir=True)
def matmul_97_rows_padded(
    A: T.Buffer((97, 16), "float32"), W: T.Buffer((16, 8), "float32"), C: T.Buffer((97, 8), "float32")
):
    T.func_attr({PADDED_ATTR: "rows 97 -> 100", "layout_free_buffers": [1]})
    A_pad = T.sblock_alloc_buffer((100, 16))
    C_pad = T.sblock_alloc_buffer((100, 8))
    for i0, i1 in T.grid(100, 16):
        with T.sblock("A_pad"):
            v0, v1 = T.axis.remap("SS", [i0, i1])
            A_pad[v0, v1] = T.if_then_else(v0 < 97, A[v0, v1], T.float32(0))
    for i, j, k in T.grid(100, 8, 16):
        with T.sblock("matmul"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C_pad[vi, vj] = T.float32(0)
            C_pad[vi, vj] = C_pad[vi, vj] + A_pad[vi, vk] * W[vk, vj]
    for i0, i1 in T.grid(97, 8):
        with T.sblock("C_pad"):
            v0, v1 = T.axis.remap("SS", [i0, i1])
            C[v0, v1] = C_pad[v0, v1]


@T.prim_func(s_tir=True)
def row_sums_97(A: T.Buffer((97, 64), "float32"), S: T.Buffer((97, 1), "float32")):
    for i, j, k in T.grid(97, 1, 64):
        with T.sblock("sum"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                S[vi, vj] = T.float32(0)
            S[vi, vj] = S[vi, vj] + A[vi, vk]


@T.prim_func(s_tir=True)
def conv_1d_97(X: T.Buffer((99, 16), "float32"), W: T.Buffer((3, 16, 8), "float32"), Y: T.Buffer((97, 8), "float32")):
    for i, j, r, c in T.grid(97, 8, 3, 16):
        with T.sblock("conv"):
            vi, vj, vr, vc = T.axis.remap("SSRR", [i, j, r, c])
            with T.init():
                Y[vi, vj] = T.float32(0)
            Y[vi, vj] = Y[vi, vj] + X[vi + vr, vc] * W[vr, vc, vj]


def _matmul(rows: int, cols: int, depth: int = 16, weight: int | None = None):
    """C[rows, cols] = A[rows, depth] B[depth, cols]; `weight` 0 or 1 marks A or B layout-free (a constant)."""
    from tvm import te

    a, b = te.placeholder((rows, depth), name="A"), te.placeholder((depth, cols), name="B")
    k = te.reduce_axis((0, depth), name="k")
    c = te.compute((rows, cols), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="matmul")
    func = te.create_prim_func([a, b, c])
    return func if weight is None else func.with_attr("layout_free_buffers", [weight])


def test_row_and_column_multiples():
    assert row_multiple(197, 6) == 6  # prime: 198 rows in 6-row blocks
    assert row_multiple(49, 6) == 5  # a 7 x 7 window: 50 rows, not 54
    assert row_multiple(197, 14) == 11  # AVX-512: 198 = 18 x 11
    assert row_multiple(128, 6) is None  # 4-row blocks already
    assert row_multiple(6, 6) is None  # one block
    assert row_multiple(13, 6) is None  # 15 rows would be 15% more work
    assert column_multiple(197, 8) == 8  # 200 columns: 25 whole vectors
    assert column_multiple(197, 16) == 16  # AVX-512: 208, 5.6% more work
    assert column_multiple(42, 16) is None  # 48 columns would be 14% more work
    assert column_multiple(84, 8) is None  # half vectors divide it
    assert column_multiple(5, 8) is None  # shorter than a vector


def test_a_prime_row_count_is_padded_to_whole_register_blocks():
    after = pad_kernel(matmul_97_rows, **AVX2).without_attr("global_symbol")
    tvm.ir.assert_structural_equal(after, matmul_97_rows_padded.without_attr("global_symbol"))


def _note(func):
    padded = pad_kernel(func, **AVX2)
    return None if padded is None else str(padded.attrs[PADDED_ATTR])


def test_rows_and_columns_are_padded_only_where_no_weight_is_read_along_them():
    assert _note(_matmul(197, 32, weight=1)) == "rows 197 -> 198"  # the weight on the right: rows are free
    assert _note(_matmul(197, 32, weight=0)) is None  # on the left: padding would copy it every call
    assert _note(_matmul(197, 197)) == "rows 197 -> 198, columns 197 -> 200"  # attention scores
    assert _note(_matmul(128, 197)) == "columns 197 -> 200"
    assert _note(_matmul(128, 197, weight=1)) is None  # a weight read along the columns


def test_unit_axes_between_rows_and_columns_are_passed_over():
    """A sequence-first projection, (197, 1, 768) x (768, 2304): its rows are the 197, not the unit axis."""
    from tvm import te

    x, w = te.placeholder((197, 1, 16), name="x"), te.placeholder((16, 32), name="w")
    k = te.reduce_axis((0, 16), name="k")
    y = te.compute((197, 1, 32), lambda i, j, n: te.sum(x[i, j, k] * w[k, n], axis=k), name="matmul")
    func = te.create_prim_func([x, w, y]).with_attr("layout_free_buffers", [1])
    assert _note(func) == "rows 197 -> 198"


def test_the_padded_columns_are_copied_once_not_selected_in_the_inner_loop():
    """The column operand's padding stays a block of its own in the default schedule: inlined, its select ran
    in the innermost vector loop, once per row block (ViT's scores, timed alone on Zen 3: 2.72 ms, 0.53 copied)."""
    from tuner.core.target import resolve_target
    from tuner.schedule.default_schedule import heuristic_schedule

    sch = heuristic_schedule(pad_kernel(_matmul(197, 197), **AVX2), resolve_target("llvm").tvm_target(), 8)
    blocks = {sch.get(b).name_hint for b in sch.get_child_blocks(sch.get_sblock("root"))}
    assert {"A_pad", "B_pad"} <= blocks, blocks


def test_what_padding_leaves_alone():
    for func in (_matmul(128, 32), row_sums_97, conv_1d_97):
        assert pad_kernel(func, **AVX2) is None, func
    mod = tvm.IRModule({"main": _matmul(128, 32), "sums": row_sums_97})
    tvm.ir.assert_structural_equal(pad_register_blocks(mod, **AVX2), mod)
    assert padded_kernels(pad_register_blocks(tvm.IRModule({"m": matmul_97_rows}), **AVX2)) == {"m": "rows 97 -> 100"}


def _attention_like(tokens: int):
    """x (1, tokens, 32) -> y = x W + b, scores = y y^T, out = scores y: every matmul over `tokens` rows."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((32, 32)).astype("float32") * 0.2, "w")
    b = numpy_helper.from_array(rng.standard_normal((32,)).astype("float32"), "b")
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["xw"]),
        helper.make_node("Add", ["xw", "b"], ["y"]),
        helper.make_node("Transpose", ["y"], ["yt"], perm=[0, 2, 1]),
        helper.make_node("MatMul", ["y", "yt"], ["scores"]),
        helper.make_node("MatMul", ["scores", "y"], ["out"]),
    ]
    graph = helper.make_graph(
        nodes,
        "attention_like",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, tokens, 32])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, tokens, 32])],
        [w, b],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_padded_kernels_compute_what_onnx_runtime_computes(tmp_path):
    """Through compile: 197 tokens get padded kernels (said in the package's preparation notes), and the package
    matches ONNX Runtime."""
    ort = pytest.importorskip("onnxruntime")
    import tuner
    from tuner.commands.compile import compile_model

    path = str(tmp_path / "attention_like.onnx")
    onnx.save(_attention_like(197), path)
    package = str(tmp_path / "m.ftpkg")
    _, manifest = compile_model(path, package, target="llvm")
    assert any("register blocks: padded rows 197 -> 198, columns 197 -> 200" in n for n in manifest["preparation"])
    model = tuner.load(package)
    x = np.random.default_rng(1).standard_normal((1, 197, 32)).astype("float32")
    expected = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(model(x=x)["out"], expected, rtol=1e-4, atol=1e-3)
