"""CUDA builds never fail on one kernel: dlight's rules kernel by kernel, a generic binding last (no GPU needed)."""

import pytest
from conftest import ROOT, run_cli

from tuner.build.executable import lower_prepared, thread_unbound_kernels
from tuner.build.gpu_rules import bind_generic, schedule_kernels
from tuner.core.target import resolve_target
from tuner.frontend.onnx_model import prepare_model
from tuner.fusion import get_strategy


@pytest.fixture(scope="module")
def cuda_edges(models_dir):
    return str(models_dir / "cuda_edges.onnx")


def test_the_two_patterns_dlight_failed_on_build_for_cuda(cuda_edges, tmp_path):
    """A conv epilogue ending in the next op's Pad (dlight's matmul rule raises, its general-reduction rule wants
    64 KB of shared memory) and a conv + swish + residual: the package builds, with device code."""
    import json

    r = run_cli("compile", cuda_edges, "--target", "cuda:sm_90", "-o", str(tmp_path / "e.ftpkg"), "--json")
    assert r.returncode == 0, r.stderr
    rules = json.loads(r.stdout)["gpu_rules"]
    assert sum(rules["kernels"].values()) == 3
    [(kernel, why)] = rules["fell_back"].items()
    assert "pad" in kernel and "not properly inlined" in why and "shared memory" in why


@pytest.mark.parametrize("arch", ["sm_80", "sm_89"])
def test_every_kernel_is_scheduled_and_bound_on_other_archs(cuda_edges, arch):
    spec = resolve_target(f"cuda:{arch}")
    lowered = lower_prepared(prepare_model(cuda_edges), spec, get_strategy("tvm"))
    mod, used, _ = schedule_kernels(lowered.mod, spec.tvm_target())
    assert len(used) == 3 and not thread_unbound_kernels(mod)


def test_the_generic_binding_always_binds_and_builds(cuda_edges):
    import tvm

    spec = resolve_target("cuda:sm_90")
    lowered = lower_prepared(prepare_model(cuda_edges), spec, get_strategy("tvm"))
    mod = lowered.mod.clone()
    for gv, func in lowered.mod.functions_items():
        if isinstance(func, tvm.tirx.PrimFunc):
            mod[gv] = bind_generic(func).with_attr("tirx.is_scheduled", True)
    assert not thread_unbound_kernels(mod)
    with spec.tvm_target():
        tvm.compile(mod, target=spec.tvm_target(), relax_pipeline="default_build")


@pytest.mark.slow
def test_cuda_sweep_builds_every_model(tmp_path):
    """Synthetic, light_* and fetched real models compile for sm_90 with device code (scripts/cuda_sweep.py)."""
    import subprocess
    import sys

    r = subprocess.run(
        [sys.executable, "scripts/cuda_sweep.py", "--json", str(tmp_path / "sweep.json")],
        cwd=ROOT, capture_output=True, text=True, timeout=3000,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]


def test_info_says_which_kernels_fell_to_a_later_rule(cuda_edges, tmp_path):
    pkg = str(tmp_path / "e.ftpkg")
    assert run_cli("compile", cuda_edges, "--target", "cuda:sm_90", "-o", pkg).returncode == 0
    r = run_cli("info", pkg)
    assert r.returncode == 0 and "GPU schedules (dlight rule: kernels)" in r.stdout, r.stdout + r.stderr
    assert "scheduled by a later rule" in r.stdout and "not properly inlined" in r.stdout


def test_an_input_name_c_does_not_take_builds_for_cuda(tmp_path):
    """light_zfnet512's input "gpu_0/data_0" became the kernel parameter `gpu_0/data_0_ptr`: nvcc refused it."""
    import numpy as np
    from conftest import save_onnx
    from onnx import helper, numpy_helper

    w = numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float32), "w/0")
    conv = helper.make_node("Conv", ["gpu_0/data_0", "w/0"], ["y"], pads=[1, 1, 1, 1], kernel_shape=[3, 3])
    relu = helper.make_node("Relu", ["y"], ["out/0"])
    model = save_onnx(str(tmp_path / "slash.onnx"), [conv, relu], {"gpu_0/data_0": (1, 3, 8, 8)},
                      {"out/0": (1, 4, 8, 8)}, [w])  # fmt: skip
    r = run_cli("compile", model, "--target", "cuda:sm_90", "-o", str(tmp_path / "s.ftpkg"))
    assert r.returncode == 0, r.stderr


def test_the_plan_says_which_kernels_fell_to_a_later_rule(cuda_edges):
    import json

    r = run_cli("plan", cuda_edges, "--target", "cuda:sm_90", "--json")
    assert r.returncode == 0, r.stderr
    notes = json.loads(r.stdout)["notes"]
    assert any(n.startswith("GPU schedules (dlight rule: kernels): ") for n in notes), notes
    assert any("scheduled by a later rule" in n and "shared memory" in n for n in notes), notes
