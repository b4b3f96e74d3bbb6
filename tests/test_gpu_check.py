"""The GPU check script's CPU parts (build-only), and the GPU tests that run only where a GPU is."""

import json
import subprocess
import sys

import pytest
from conftest import ROOT


def _gpu_arch():
    from tuner.core.target import detect_gpu_arch

    return detect_gpu_arch()


@pytest.mark.slow
def test_gpu_check_build_only(cnn, transformer, tmp_path):
    r = subprocess.run(
        [
            sys.executable,
            "scripts/gpu_check.py",
            cnn,
            transformer,
            "--build-only",
            "--target",
            "cuda:sm_90",
            "-o",
            str(tmp_path),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.load(open(tmp_path / "results.json"))
    steps = doc["steps"]
    assert set(steps) == {
        "compile_verify_cnn",
        "compile_verify_transformer",
        "tuning_candidates_build_only",
        "float16_tensor_cores",
        "compare_fused_unfused",
        "cuda_graphs",
    }
    assert all(s["ok"] for s in steps.values())
    graphs = steps["cuda_graphs"]
    assert graphs["with"]["graph_calls"] > 0 and graphs["without"]["graph_calls"] == 0
    assert steps["compile_verify_cnn"]["device_code"]["arch"] == "sm_90"
    # 16 unfused: batch-norms are folded into the convs before any strategy runs
    assert "cut launches 16 → 7" in steps["compare_fused_unfused"]["verdict"]
    assert (tmp_path / "compare" / "report.html").exists()
    [task] = steps["tuning_candidates_build_only"]["tasks"]
    assert task["candidates"] > 0 and task["built"] == task["thread_bound"] == task["candidates"]
    [fp16] = steps["float16_tensor_cores"]["tasks"]
    assert steps["float16_tensor_cores"]["precision"] == "float16"
    assert fp16["tensor_core"] > 0 and fp16["built"] == fp16["candidates"] > 0


@pytest.mark.slow
def test_cuda_tensor_core_candidates_for_fp16(tmp_path):
    """An fp16 MatMul+ReLU for sm_90: the tuner's design space uses tensor cores, and the candidates build."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from tuner.core.target import resolve_target
    from tuner.frontend.onnx_model import prepare_model
    from tuner.fusion import get_strategy
    from tuner.pipeline import import_for, lower
    from tuner.tuning import build_candidates, half_precision

    w = numpy_helper.from_array((np.random.default_rng(0).random((256, 256)) - 0.5).astype(np.float16), "w")
    f16 = TensorProto.FLOAT16
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm"), helper.make_node("Relu", ["y"], ["z"], name="relu")],
        "fp16_mlp",
        [helper.make_tensor_value_info("x", f16, [128, 256])],
        [helper.make_tensor_value_info("z", f16, [128, 256])],
        [w],
    )
    path = str(tmp_path / "fp16.onnx")
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    spec, strategy = resolve_target("cuda:sm_90"), get_strategy("tvm")
    mod, params, _ = import_for(prepare_model(path, None, None), strategy)
    fused = lower(mod, spec, strategy, params=params)
    assert half_precision(fused)
    [task] = build_candidates(fused, spec, max_tasks=1, per_task=4)
    assert task["task"] == "fused_matmul_cast_relu" and task["errors"] == []  # fp32 accumulator, cast back
    assert task["built"] == task["thread_bound"] == task["candidates"] > 0
    assert task["tensor_core"] > 0  # WMMA/MMA intrinsics in the sampled schedules


def test_gpu_check_without_gpu_says_so(cnn, transformer, tmp_path):
    if _gpu_arch():
        pytest.skip("a GPU is present")
    r = subprocess.run(
        [sys.executable, "scripts/gpu_check.py", cnn, transformer, "--target", "cuda:sm_90", "-o", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2 and "--build-only" in r.stderr


@pytest.mark.gpu
def test_gpu_check_on_a_gpu(cnn, transformer, tmp_path):
    if not _gpu_arch():
        pytest.skip("needs an NVIDIA GPU")
    r = subprocess.run(
        [sys.executable, "scripts/gpu_check.py", cnn, transformer, "--trials", "16", "-o", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert r.returncode == 0, r.stdout + r.stderr
