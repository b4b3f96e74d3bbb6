"""Every bad input: a clear message, exit code 2, no traceback, nothing half-written."""

import json
import os
import shutil
import subprocess
import sys
import zipfile

import numpy as np
import onnx
import pytest
from conftest import ROOT, run_cli
from onnx import TensorProto, helper

from tuner.core.errors import TunerError


def assert_clean_error(r, *needles, code=2):
    assert r.returncode == code, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr and "Traceback" not in r.stdout
    for n in needles:
        assert n in r.stderr, r.stderr


def test_missing_file(tmp_path):
    assert_clean_error(run_cli("check", str(tmp_path / "nope.onnx")), "no such file")


def test_not_onnx(tmp_path):
    p = tmp_path / "junk.onnx"
    p.write_bytes(b"\x00\xffnot a protobuf at all" * 10)
    assert_clean_error(run_cli("compile", str(p), "-o", str(tmp_path / "o.ftpkg")), "junk.onnx", "not a readable ONNX")
    assert not (tmp_path / "o.ftpkg").exists()


def test_truncated_protobuf(cnn, tmp_path):
    data = open(cnn, "rb").read()
    p = tmp_path / "truncated.onnx"
    p.write_bytes(data[: len(data) // 2])
    assert_clean_error(run_cli("check", str(p)), "truncated.onnx")


def test_checker_failure(tmp_path):
    node = helper.make_node("Relu", ["x"], ["y"], name="r")
    g = helper.make_graph(
        [node, helper.make_node("Relu", ["y"], ["y"], name="dup")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    p = tmp_path / "bad.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(p))
    assert_clean_error(run_cli("check", str(p)), "fails onnx.checker")


def test_unsupported_ops_compile_lists_nodes(tmp_path):
    from test_check import unsupported_in_if_model

    p = unsupported_in_if_model(tmp_path / "bernoulli.onnx")
    r = run_cli("compile", p, "--target", "llvm", "-o", str(tmp_path / "o.ftpkg"))
    assert_clean_error(r, "Bernoulli", "branch/else_branch/act/Bernoulli")


def test_dynamic_dims_without_input_shape(mlp, tmp_path):
    assert_clean_error(
        run_cli("compile", mlp, "-o", str(tmp_path / "o.ftpkg"), "--target", "llvm"),
        "dynamic dimensions need --input-shape",
        "x:1x32",
    )


def test_input_shape_naming_no_input(cnn, tmp_path):
    assert_clean_error(
        run_cli(
            "compile", cnn, "--input-shape", "image:1x3x32x32", "-o", str(tmp_path / "o.ftpkg"), "--target", "llvm"
        ),
        "no input named 'image'",
        "input: float32[1x3x32x32]",
    )
    assert_clean_error(run_cli("check", cnn, "--input-shape", "image:1x3x32x32"), "no input named 'image'")


def test_unknown_target_and_fusion(cnn, tmp_path):
    assert_clean_error(run_cli("compile", cnn, "--target", "tpu", "-o", str(tmp_path / "o")), "unknown target 'tpu'")
    assert_clean_error(run_cli("compile", cnn, "--target", "cuda:90", "-o", str(tmp_path / "o")), "not a CUDA arch")
    assert_clean_error(
        run_cli("compile", cnn, "--fusion", "magic", "-o", str(tmp_path / "o")),
        "unknown fusion strategy",
        "known strategies:",
        "none",
        "tvm",
        "patterns",
        "cost",
        "horizontal",
    )


def test_cuda_without_toolchain(monkeypatch):
    import tuner.core.target as target

    monkeypatch.setattr(target, "cuda_toolchain_available", lambda: False)
    with pytest.raises(TunerError, match="neither nvcc nor NVRTC"):
        target.resolve_target("cuda:sm_90")


def test_cuda_without_arch_or_gpu(monkeypatch):
    import tuner.core.target as target

    monkeypatch.setattr(target, "detect_gpu_arch", lambda: None)
    with pytest.raises(TunerError, match="no GPU found"):
        target.resolve_target("cuda")


def test_unwritable_output(cnn, tmp_path):
    assert_clean_error(
        run_cli("compile", cnn, "--target", "llvm", "-o", str(tmp_path / "no" / "dir" / "o.ftpkg")), "does not exist"
    )
    ro = tmp_path / "ro"
    ro.mkdir()
    os.chmod(ro, 0o500)
    try:
        if os.access(ro, os.W_OK):  # root ignores permissions: use a path under a file instead
            target = str(tmp_path / "file_not_dir" / "o.ftpkg")
            (tmp_path / "file_not_dir").write_text("x")
        else:
            target = str(ro / "o.ftpkg")
        r = run_cli("compile", cnn, "--target", "llvm", "-o", target)
        assert r.returncode == 2 and "Traceback" not in r.stderr
    finally:
        os.chmod(ro, 0o700)


def test_wrong_inputs_to_package(cnn_package, tmp_path):
    import tuner

    m = tuner.load(cnn_package)
    x = np.zeros((1, 3, 32, 32), np.float32)
    with pytest.raises(TunerError, match="no input named 'image'"):
        m(image=x)
    with pytest.raises(TunerError, match=r"shape \[1, 3, 16, 16\]"):
        m(np.zeros((1, 3, 16, 16), np.float32))
    with pytest.raises(TunerError, match="dtype float64"):
        m(x.astype(np.float64))
    with pytest.raises(TunerError, match="missing inputs: input"):
        m()
    np.savez(tmp_path / "bad.npz", image=x)
    assert_clean_error(run_cli("run", cnn_package, "--inputs", str(tmp_path / "bad.npz")), "image")


def _rewrite(package, dst, manifest_edit=None, member_edit=None, drop=None, redigest=True, rehash=False):
    """A copy of `package` with edits; by default its digest is recomputed (what a careless tool would do), so
    the checks behind the digest are the ones tested."""
    import hashlib

    with zipfile.ZipFile(package) as z:
        items = {n: z.read(n) for n in z.namelist()}
    manifest = json.loads(items["manifest.json"])
    if member_edit:
        items["model.so"] = member_edit(items["model.so"])
        if rehash:
            manifest["members"]["model.so"] = {
                "sha256": hashlib.sha256(items["model.so"]).hexdigest(),
                "bytes": len(items["model.so"]),
            }
    if manifest_edit:
        manifest_edit(manifest)
    items["manifest.json"] = json.dumps(manifest).encode()
    if redigest:
        items["digest.sha256"] = hashlib.sha256(items["manifest.json"]).hexdigest().encode()
    if drop:
        del items[drop]
    with zipfile.ZipFile(dst, "w") as z:
        for n, d in items.items():
            z.writestr(n, d)
    return str(dst)


def test_package_bad_checksum_missing_member(cnn_package, tmp_path):
    bad = _rewrite(cnn_package, tmp_path / "bad.ftpkg", member_edit=lambda b: b[:-100] + b"\0" * 100)
    assert_clean_error(run_cli("run", bad), "checksum mismatch in model.so")
    gone = _rewrite(cnn_package, tmp_path / "gone.ftpkg", drop="model.so")
    assert_clean_error(run_cli("run", gone), "member model.so is missing")
    junk = tmp_path / "junk.ftpkg"
    junk.write_bytes(b"PK\x03\x04 nope")
    assert_clean_error(run_cli("run", str(junk)), "not a fusion-tuner package")


def test_package_for_other_target_device_or_tvm(cnn_package, tmp_path, monkeypatch):
    def other_tvm(m):
        m["tvm_version"] = "0.19.0"

    assert_clean_error(run_cli("run", _rewrite(cnn_package, tmp_path / "a.ftpkg", other_tvm)), "built with TVM 0.19.0")

    def cuda(m):
        m["target"] = {"kind": "cuda", "config": {"kind": "cuda", "arch": "sm_90"}, "key": "cuda-sm_90"}

    assert_clean_error(run_cli("run", _rewrite(cnn_package, tmp_path / "b.ftpkg", cuda)), "no GPU is available")
    assert_clean_error(run_cli("run", cnn_package, "--device", "cuda"), "runs on cpu, not on cuda")

    def foreign_cpu(m):
        m["target"]["config"]["mcpu"] = "__test_cpu__"

    import tuner.runtime.compat as compat

    monkeypatch.setattr(compat, "required_cpu_features", lambda mcpu: ["__no_such_isa__"] * (mcpu == "__test_cpu__"))
    from tuner.runtime import load

    with pytest.raises(TunerError, match="this CPU lacks them"):
        load(_rewrite(cnn_package, tmp_path / "c.ftpkg", foreign_cpu))


def test_verify_against_another_model(cnn_package, transformer):
    assert_clean_error(
        run_cli("run", cnn_package, "--verify", transformer), "not the model this package was built from"
    )


def test_failed_build_leaves_nothing(tmp_path, cnn):
    """A build that fails inside TVM (a lowering pass raises) leaves no package and no temp file behind."""
    import tvm

    from tuner.commands.compile import compile_model
    from tuner.fusion import FusionStrategy

    @tvm.transform.module_pass(opt_level=0)
    def broken(mod, ctx):
        raise RuntimeError("this pass always fails")

    class Broken(FusionStrategy):
        name, description = "broken", "a pass that raises"

        def graph_passes(self, target, params):
            return [broken]

    shutil.copy(cnn, tmp_path / "m.onnx")
    out = tmp_path / "o.ftpkg"
    with pytest.raises(Exception, match="this pass always fails"):
        compile_model(str(tmp_path / "m.onnx"), str(out), target="llvm", fusion=Broken())
    assert not out.exists() and sorted(os.listdir(tmp_path)) == ["m.onnx"]


def test_debug_shows_traceback(tmp_path):
    r = run_cli("check", str(tmp_path / "nope.onnx"), "--debug")
    assert r.returncode != 0 and "Traceback" in r.stderr


def test_out_of_memory_is_a_clear_error(mlp, tmp_path):
    """A real allocation failure: the run's address space is capped after loading, so the intermediates (512 MiB
    for a batch of 2^20) cannot be allocated. The error says what one inference needs; no outputs file is left."""
    import textwrap

    pkg = str(tmp_path / "big.ftpkg")
    r = run_cli("compile", mlp, "--input-shape", "x:1048576x32", "--target", "llvm", "-o", pkg)
    assert r.returncode == 0, r.stderr
    script = textwrap.dedent(f"""
        import re, resource
        import tuner
        from tuner.core.errors import TunerError
        from tuner.commands.run import save_npz_atomic
        m = tuner.load({pkg!r})
        x = m.random_inputs()
        mapped = int(re.search(r"VmSize:\\s+(\\d+)", open("/proc/self/status").read()).group(1)) * 1024
        cap = mapped + 2 * sum(a.nbytes for a in x.values()) + (32 << 20)
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
        try:
            save_npz_atomic({str(tmp_path / "out.npz")!r}, m(**x))
        except TunerError as err:
            print("TunerError:", err)
    """)
    r = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
        env={**os.environ, "TVM_NUM_THREADS": "1"},
    )
    assert "TunerError: " in r.stdout and "out of memory on the host while running the model" in r.stdout, (
        r.stdout + r.stderr
    )
    assert "512.0 MiB of intermediates" in r.stdout and "hint:" in r.stdout
    assert not (tmp_path / "out.npz").exists()
