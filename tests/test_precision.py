"""--dtype float16: the mixed-precision graph, its plan, its packages on CPU and CUDA, and what is refused."""

import json

import pytest
from conftest import run_cli

from tuner.core.errors import TunerError
from tuner.runtime.package import read_package


def test_precision_names_and_refusals():
    from tuner.core.precision import get_precision

    assert get_precision(None).name == "float32" and get_precision("fp16").name == "float16"
    assert get_precision("float16").rtol > get_precision("float32").rtol
    with pytest.raises(TunerError, match="float16 only"):
        get_precision("bfloat16")
    with pytest.raises(TunerError, match="unknown precision"):
        get_precision("int8")


def test_mixed_precision_pass_structure():
    """One cast per tensor (CSE merges the per-consumer casts), fp16 operands, fp32 accumulation, fp32 signature."""
    import tvm
    from tvm import relax
    from tvm.script import relax as R

    from tuner.transform.precision import get_precision, precision_pass

    @tvm.script.ir_module
    class Before:
        @R.function
        def main(x: R.Tensor((4, 8), "float32"), w1: R.Tensor((8, 8), "float32"), w2: R.Tensor((8, 8), "float32")):
            with R.dataflow():
                a = R.matmul(x, w1)
                b = R.matmul(x, w2)
                c = R.add(a, b)
                R.output(c)
            return c

    @tvm.script.ir_module
    class Expected:
        @R.function
        def main(
            x: R.Tensor((4, 8), "float32"), w1: R.Tensor((8, 8), "float32"), w2: R.Tensor((8, 8), "float32")
        ) -> R.Tensor((4, 8), "float32"):
            with R.dataflow():
                xh = R.astype(x, "float16")
                w1h = R.astype(w1, "float16")
                w2h = R.astype(w2, "float16")
                a = R.matmul(xh, w1h, out_dtype="float32")
                a16 = R.astype(a, "float16")
                b = R.matmul(xh, w2h, out_dtype="float32")
                b16 = R.astype(b, "float16")
                c = R.add(a16, b16)
                c32 = R.astype(c, "float32")
                R.output(c32)
            return c32

    tvm.ir.assert_structural_equal(precision_pass(get_precision("float32"))(Before), Before)  # no half precision
    after = precision_pass(get_precision("float16"))(Before)
    tvm.ir.assert_structural_equal(relax.transform.CanonicalizeBindings()(after), Expected)


def test_a_half_precision_model_accumulates_its_matmuls_in_float32():
    import tvm
    from tvm.script import relax as R

    from tuner.transform.precision import AccumulateHalfInFloat32

    @tvm.script.ir_module
    class Before:
        @R.function
        def main(x: R.Tensor((4, 8), "float16"), w: R.Tensor((8, 8), "float16")):
            with R.dataflow():
                y = R.matmul(x, w)
                R.output(y)
            return y

    @tvm.script.ir_module
    class Expected:
        @R.function
        def main(x: R.Tensor((4, 8), "float16"), w: R.Tensor((8, 8), "float16")) -> R.Tensor((4, 8), "float16"):
            with R.dataflow():
                wide = R.matmul(x, w, out_dtype="float32")
                y = R.astype(wide, "float16")
                R.output(y)
            return y

    tvm.ir.assert_structural_equal(AccumulateHalfInFloat32()(Before), Expected)


def test_float16_cpu_package_verifies_and_plan_keeps_provenance(transformer, tmp_path):
    out = str(tmp_path / "t16.ftpkg")
    r = run_cli("compile", transformer, "--target", "llvm", "--dtype", "float16", "--json", "-o", out)
    assert r.returncode == 0, r.stderr
    manifest, _ = read_package(out)
    assert manifest["precision"] == "float16" and manifest["kernels"] == 21  # 19 + one cast per fp16 input
    r = run_cli("run", out, "--verify", transformer, "--json", "--repeat", "1")
    doc = json.loads(r.stdout)
    assert r.returncode == 0 and doc["verify"]["ok"] and doc["precision"] == "float16"
    assert doc["verify"]["rtol"] == 2e-2
    assert 1e-6 < doc["verify"]["max_abs_err"]  # fp16 really ran: not bit-equal to fp32

    from tuner.plan import build_plan

    plan = build_plan(transformer, target="llvm", fusion="tvm", precision="float16")
    assert plan.precision == "float16" and plan.kernels == 21
    assert all(g.onnx_nodes for g in plan.groups)  # the casts are attributed to the matmuls they feed


def test_bfloat16_is_refused_with_a_reason(transformer, tmp_path):
    r = run_cli("compile", transformer, "--dtype", "bfloat16", "-o", str(tmp_path / "x.ftpkg"))
    assert r.returncode == 2 and "float16 only" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "x.ftpkg").exists()


def test_float16_cuda_build_uses_tensor_core_space(transformer, tmp_path):
    """fp16 through --dtype: the CUDA package builds and every kernel is thread-bound; the tuner's design space for
    its heaviest kernel samples WMMA schedules, and (TVM 0.27 StorageRewrite workaround) they all build."""
    from tuner.build.executable import thread_unbound_kernels
    from tuner.commands.compile import compile_model
    from tuner.core.target import resolve_target
    from tuner.frontend.onnx_model import prepare_model
    from tuner.fusion import get_strategy
    from tuner.pipeline import import_for, lower
    from tuner.tuning import build_candidates, half_precision

    result, manifest = compile_model(transformer, str(tmp_path / "c.ftpkg"), target="cuda:sm_90", precision="float16")
    assert manifest["precision"] == "float16" and manifest["device_code"]["arch"] == "sm_90"
    assert thread_unbound_kernels(result.fused_mod) == []

    spec, strategy = resolve_target("cuda:sm_90"), get_strategy("tvm")
    mod, params, _ = import_for(prepare_model(transformer, precision="float16"), strategy)
    fused = lower(mod, spec, strategy, params=params)
    assert half_precision(fused)
    [task] = build_candidates(fused, spec, max_tasks=1, per_task=4)
    assert task["errors"] == [] and task["tensor_core"] > 0
    assert task["built"] == task["thread_bound"] == task["candidates"] > 0


def test_tensor_core_record_builds_into_cuda_package(transformer, tmp_path):
    """A tensorized (WMMA) schedule in the tuning database reaches the package: applied, built, compiled by nvcc.
    The record's run time is a placeholder (nothing is measured without a GPU); what is tested is the build."""
    from tvm.s_tir import meta_schedule as ms

    from tuner.commands.compile import compile_model
    from tuner.core.target import resolve_target
    from tuner.frontend.onnx_model import prepare_model
    from tuner.fusion import get_strategy
    from tuner.pipeline import import_for, lower
    from tuner.runtime.device_code import cuda_sources
    from tuner.tuning import sample_candidates, uses_tensor_cores
    from tuner.tuning.database.store import new_manifest, open_database, write_manifest

    spec, strategy = resolve_target("cuda:sm_90"), get_strategy("tvm")
    mod, params, _ = import_for(prepare_model(transformer, precision="float16"), strategy)
    [sampled] = sample_candidates(lower(mod, spec, strategy, params=params), spec, max_tasks=1, per_task=4)
    task, cand = sampled.task, next(c for c in sampled.candidates if uses_tensor_cores(c.sch.mod))
    db_dir = str(tmp_path / "db")
    db, _, _ = open_database(db_dir, spec, create=True, writer=True)
    write_manifest(db_dir, new_manifest(spec, "tvm"))  # as tune-model does before its first record
    db.commit_tuning_record(
        ms.database.TuningRecord(
            cand.sch.trace, db.commit_workload(task.dispatched[0]), run_secs=[1e-3], target=spec.tvm_target()
        )
    )

    result, manifest = compile_model(
        transformer, str(tmp_path / "tc.ftpkg"), target="cuda:sm_90", db=db_dir, precision="float16"
    )
    assert manifest["tuning_db"]["applied"] == 1
    assert uses_tensor_cores(result.fused_mod)
    assert "wmma::mma_sync" in cuda_sources(result.executable)[0]
    assert manifest["device_code"]["arch"] == "sm_90"


def test_clip_with_constant_bounds_imports_as_graph_ops():
    """TVM's converter emits Clip as two TIR calls (maximum, minimum) that graph passes cannot see into, and that
    broke ToMixedPrecision on PP-OCR. Constant float bounds import as Relax maximum/minimum; other cases keep the
    converter."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    from tuner.frontend.onnx_model import prepare_model

    def clip_model(dtype, lo, hi):
        np_dtype = helper.tensor_dtype_to_np_dtype(dtype)
        inits = [
            numpy_helper.from_array(np.array(lo, np_dtype), "lo"),
            numpy_helper.from_array(np.array(hi, np_dtype), "hi"),
        ]
        g = helper.make_graph(
            [helper.make_node("Clip", ["x", "lo", "hi"], ["y"], name="clip")],
            "clip",
            [helper.make_tensor_value_info("x", dtype, [2, 3])],
            [helper.make_tensor_value_info("y", dtype, [2, 3])],
            inits,
        )
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])

    def main_ops(model):
        from tuner.pipeline import import_model

        mod, _, _ = import_model(prepare_model(model))
        ops = [
            getattr(getattr(b.value, "op", None), "name", None) for blk in mod["main"].body.blocks for b in blk.bindings
        ]
        return [str(op) for op in ops if op]

    assert main_ops(clip_model(TensorProto.FLOAT, 0.0, 6.0)) == ["relax.maximum", "relax.minimum"]
    assert main_ops(clip_model(TensorProto.FLOAT, -np.inf, 6.0)) == ["relax.minimum"]
    assert "relax.call_tir" in main_ops(clip_model(TensorProto.FLOAT, np.nan, 6.0))  # NaN bound: the converter
    assert main_ops(clip_model(TensorProto.INT8, 0, 6)) == ["relax.call_tir"] * 2
