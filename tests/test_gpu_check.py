"""The GPU check script's CPU parts (build-only), and the GPU tests that run only where a GPU is."""

import json
import subprocess
import sys

import pytest
from conftest import ROOT


def _gpu_arch():
    from tuner.target import detect_gpu_arch

    return detect_gpu_arch()


def test_gpu_check_build_only(cnn, transformer, tmp_path):
    r = subprocess.run([sys.executable, "scripts/gpu_check.py", cnn, transformer, "--build-only", "--target", "cuda:sm_90",
                        "-o", str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.load(open(tmp_path / "results.json"))
    steps = doc["steps"]
    assert set(steps) == {"compile_verify_cnn", "compile_verify_transformer", "compare_fused_unfused"}
    assert all(s["ok"] for s in steps.values())
    assert steps["compile_verify_cnn"]["device_code"]["arch"] == "sm_90"
    assert "cut launches 28 → 7" in steps["compare_fused_unfused"]["verdict"]
    assert (tmp_path / "compare" / "report.html").exists()


def test_gpu_check_without_gpu_says_so(cnn, transformer, tmp_path):
    if _gpu_arch():
        pytest.skip("a GPU is present")
    r = subprocess.run([sys.executable, "scripts/gpu_check.py", cnn, transformer, "--target", "cuda:sm_90",
                        "-o", str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "--build-only" in r.stderr


@pytest.mark.gpu
def test_gpu_check_on_a_gpu(cnn, transformer, tmp_path):
    if not _gpu_arch():
        pytest.skip("needs an NVIDIA GPU")
    r = subprocess.run([sys.executable, "scripts/gpu_check.py", cnn, transformer, "--trials", "16", "-o", str(tmp_path)],
                       cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr
