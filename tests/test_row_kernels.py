"""Row kernels (tuner/tuning/row_kernels.py): softmax and layer norms scheduled row by row, built through the real
pipeline against ONNX Runtime, and the kernels the schedule must leave to the generic rules."""

import re

import numpy as np
import pytest
import tvm
from conftest import assert_matches_onnxruntime, save_onnx
from tvm.script import tirx as T

from tuner.schedule.default_schedule import heuristic_schedule
from tuner.schedule.recipes import GENERIC_ROW_KERNELS
from tuner.schedule.row_kernels import row_schedule

RNG = np.random.default_rng(0)
SHAPE = (2, 12, 64)


def _norms_model(path: str) -> str:
    """Softmax over the last axis, then a layer norm written out in ONNX ops (mean kept as (2, 12, 1))."""
    from onnx import helper, numpy_helper

    inits = [
        numpy_helper.from_array(np.array(1e-5, "float32"), "eps"),
        numpy_helper.from_array(RNG.standard_normal(64).astype("float32"), "gamma"),
        numpy_helper.from_array(RNG.standard_normal(64).astype("float32"), "beta"),
    ]
    nodes = [
        helper.make_node("Softmax", ["x"], ["p"], axis=-1),
        helper.make_node("ReduceMean", ["p"], ["mean"], axes=[-1]),
        helper.make_node("Sub", ["p", "mean"], ["d"]),
        helper.make_node("Mul", ["d", "d"], ["sq"]),
        helper.make_node("ReduceMean", ["sq"], ["var"], axes=[-1]),
        helper.make_node("Add", ["var", "eps"], ["ve"]),
        helper.make_node("Sqrt", ["ve"], ["sd"]),
        helper.make_node("Div", ["d", "sd"], ["n"]),
        helper.make_node("Mul", ["n", "gamma"], ["g"]),
        helper.make_node("Add", ["g", "beta"], ["y"]),
    ]
    return save_onnx(path, nodes, {"x": SHAPE}, {"y": SHAPE}, inits)


@pytest.fixture(scope="module")
def norms_model(tmp_path_factory):
    return _norms_model(str(tmp_path_factory.mktemp("rows") / "norms.onnx"))


def test_softmax_and_layer_norm_run_row_by_row_and_match_onnxruntime(norms_model):
    from tuner.build.executable import build_prepared
    from tuner.core.ir import kernel_scripts
    from tuner.core.target import resolve_target
    from tuner.frontend.onnx_model import prepare_model
    from tuner.fusion import get_strategy

    built = build_prepared(prepare_model(norms_model), resolve_target("llvm"), get_strategy("tvm"))
    scripts = kernel_scripts(built.fused_mod)
    softmax = next(s for name, s in scripts.items() if "softmax" in name)
    # one loop over the 24 rows (parallel, or serial where the kernel is too small for a parallel launch) holding
    # every block; the max and the sum through vector-wide partial results; exp computed once, kept per row
    rows = re.compile(r"for \w+ in (T\.parallel\(|range\()T\.int64\(24\)\)")
    assert len(rows.findall(softmax)) == 1 and softmax.count("_rf") >= 2, softmax
    assert "T_fast_exp" in softmax and "T.vectorized(" in softmax
    norms = [s for name, s in scripts.items() if "mean" in name]  # the layer norm's mean and variance, per row
    assert len(norms) == 2 and all(len(rows.findall(s)) == 1 and "_rf" in s for s in norms), scripts.keys()
    assert_matches_onnxruntime(built.executable, norms_model, {"x": RNG.standard_normal(SHAPE).astype("float32")})


@T.prim_func(private=True, s_tir=True)
def _softmax(x: T.Buffer((4, 32), "float32"), y: T.Buffer((4, 32), "float32")):
    m = T.sblock_alloc_buffer((4,))
    s = T.sblock_alloc_buffer((4,))
    for i, k in T.grid(4, 32):
        with T.sblock("max"):
            vi, vk = T.axis.remap("SR", [i, k])
            with T.init():
                m[vi] = T.min_value("float32")
            m[vi] = T.max(m[vi], x[vi, vk])
    for i, k in T.grid(4, 32):
        with T.sblock("sum"):
            vi, vk = T.axis.remap("SR", [i, k])
            with T.init():
                s[vi] = T.float32(0)
            s[vi] = s[vi] + T.exp(x[vi, vk] - m[vi])
    for i, j in T.grid(4, 32):
        with T.sblock("norm"):
            vi, vj = T.axis.remap("SS", [i, j])
            y[vi, vj] = T.exp(x[vi, vj] - m[vi]) / s[vi]


@T.prim_func(private=True, s_tir=True)
def _column_sum(x: T.Buffer((32, 4), "float32"), y: T.Buffer((32, 4), "float32")):
    s = T.sblock_alloc_buffer((4,))
    for j, k in T.grid(4, 32):
        with T.sblock("sum"):
            vj, vk = T.axis.remap("SR", [j, k])
            with T.init():
                s[vj] = T.float32(0)
            s[vj] = s[vj] + x[vk, vj]
    for i, j in T.grid(32, 4):
        with T.sblock("div"):
            vi, vj = T.axis.remap("SS", [i, j])
            y[vi, vj] = x[vi, vj] / s[vj]


@T.prim_func(private=True, s_tir=True)
def _matmul(a: T.Buffer((16, 32), "float32"), b: T.Buffer((32, 16), "float32"), c: T.Buffer((16, 16), "float32")):
    for i, j, k in T.grid(16, 16, 32):
        with T.sblock("matmul"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                c[vi, vj] = T.float32(0)
            c[vi, vj] = c[vi, vj] + a[vi, vk] * b[vk, vj]


def test_row_schedule_numerics_and_what_it_leaves_alone():
    sch = row_schedule(_softmax, lanes=8)
    assert sch is not None
    lib = tvm.compile(tvm.IRModule({"main": sch.mod["main"].with_attr("global_symbol", "main")}), target="llvm")
    x = RNG.standard_normal((4, 32)).astype("float32")
    y = tvm.runtime.tensor(np.zeros((4, 32), "float32"))
    lib["main"](tvm.runtime.tensor(x), y)
    want = np.exp(x - x.max(-1, keepdims=True))
    np.testing.assert_allclose(y.numpy(), want / want.sum(-1, keepdims=True), rtol=1e-5)
    # a reduction over an outer axis, and a matmul (no per-row block after it): the generic rules keep them
    assert row_schedule(_column_sum, lanes=8) is None
    assert row_schedule(_matmul, lanes=8) is None


def test_default_schedule_takes_the_row_schedule_unless_the_recipe_says_not():
    target = tvm.target.Target({"kind": "llvm", "num-cores": 2})
    rows = heuristic_schedule(_softmax, target, lanes=8)
    generic = heuristic_schedule(_softmax, target, lanes=8, recipe=GENERIC_ROW_KERNELS)
    assert any(inst.kind.name == "RFactor" for inst in rows.trace.insts)
    assert not any(inst.kind.name == "RFactor" for inst in generic.trace.insts)


@pytest.mark.parametrize("length, partials", [(325, {16: 13, 8: 5}), (331, {16: 0, 8: 0})])
def test_rows_no_power_of_two_divides_run_full_vectors_and_a_tail(tmp_path, length, partials):
    """A CTC head's 6,625 classes: the max and the sum through partial results as wide as the row's largest divisor
    up to a vector (325: 13 lanes with AVX-512, 5 with AVX2; a prime row keeps scalar reductions), exp and the
    division in full vectors with a scalar tail, as two loops (a predicated vector loop ran lane by lane). On the
    host's own vectors: the built kernel runs here."""
    from onnx import helper

    from tuner.build.executable import build_prepared
    from tuner.core.ir import kernel_scripts
    from tuner.core.target import resolve_target, vector_lanes
    from tuner.frontend.onnx_model import prepare_model
    from tuner.fusion import get_strategy

    shape = (2, 40, length)
    model = save_onnx(
        str(tmp_path / "s.onnx"), [helper.make_node("Softmax", ["x"], ["y"], axis=-1)], {"x": shape}, {"y": shape}, []
    )
    spec = resolve_target("llvm")
    lanes = vector_lanes(spec)
    built = build_prepared(prepare_model(model), spec, get_strategy("tvm"))
    softmax = next(s for name, s in kernel_scripts(built.fused_mod).items() if "softmax" in name)
    widths = set(re.findall(r"_rf = T\.sblock_alloc_buffer\(\(T\.int64\((\d+)\)", softmax))
    assert widths == ({str(partials[lanes])} if partials[lanes] else set()), softmax
    tail = length - length % lanes
    assert softmax.count(f"in range(T.int64({tail}), T.int64({length}))") == 2, softmax  # exp's and the norm's tails
    assert softmax.count(f"T.vectorized(T.int64({lanes}))") >= 2
    assert_matches_onnxruntime(built.executable, model, {"x": 4 * RNG.standard_normal(shape).astype("float32")})
