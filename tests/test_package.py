"""compile -> package -> load in a fresh process -> same outputs as ONNX Runtime."""

import json
import shutil
import subprocess
import sys

import numpy as np
import pytest
from conftest import ROOT, assert_worded, light, run_cli

from tuner.commands.compile import compile_model
from tuner.core.errors import TunerError
from tuner.report.reference import compare_outputs, run_onnxruntime
from tuner.runtime.package import read_package

FRESH_PROCESS = r"""
import json, sys
import numpy as np
import tuner
m = tuner.load(sys.argv[1])
x = np.load(sys.argv[2])
out = m(x["input"])                      # positional
out2 = m(input=x["input"])               # by name
assert set(out) == {"probs"} and np.array_equal(out["probs"], out2["probs"])
np.save(sys.argv[3], out["probs"])
# `import tvm` itself loads relax and meta_schedule; what we control is the rest of the compiler side.
heavy = [k for k in ("onnx", "onnxruntime", "onnxsim", "tvm.relax.frontend.onnx", "tuner.frontend.importer",
                     "tuner.build.executable",
                     "tuner.frontend.onnx_model", "xgboost") if k in sys.modules]
print(json.dumps({"heavy": heavy}))
"""


def test_manifest_is_complete(cnn_package, cnn):
    manifest, members = read_package(cnn_package)
    assert manifest["format_version"] == 2
    assert manifest["model"]["file"] == "cnn.onnx" and len(manifest["model"]["sha256"]) == 64
    assert manifest["inputs"] == [{"name": "input", "shape": [1, 3, 32, 32], "dtype": "float32"}]
    assert manifest["outputs"] == [{"name": "probs", "shape": [1, 10], "dtype": "float32"}]
    assert manifest["target"]["kind"] == "llvm" and manifest["target"]["config"]["mcpu"]
    assert manifest["tvm_version"].startswith("0.27") and manifest["tvm_ffi_version"].startswith("0.1.14")
    assert manifest["fusion"] == "tvm" and manifest["kernels"] == len(manifest["kernel_names"]) > 0
    assert manifest["tuning_db"] is None and manifest["build_seconds"] > 0 and manifest["built_at"]
    assert set(manifest["members"]) == {"model.so"} and set(members) == {"model.so"}


def test_round_trip_in_fresh_process_matches_onnxruntime(cnn_package, cnn, tmp_path):
    x = np.random.default_rng(1).standard_normal((1, 3, 32, 32)).astype(np.float32)
    np.savez(tmp_path / "in.npz", input=x)
    script = tmp_path / "deploy.py"
    script.write_text(FRESH_PROCESS)
    r = subprocess.run(
        [sys.executable, str(script), cnn_package, str(tmp_path / "in.npz"), str(tmp_path / "out.npy")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout.strip().splitlines()[-1])["heavy"] == []
    got = np.load(tmp_path / "out.npy")
    ref = run_onnxruntime(cnn, {"input": x})
    assert compare_outputs({"probs": got}, ref)["ok"]


@pytest.mark.parametrize("fusion", ["none", "tvm"])
def test_compile_and_verify_synthetic(transformer, fusion, tmp_path):
    out = str(tmp_path / "t.ftpkg")
    result, manifest = compile_model(transformer, out, target="llvm", fusion=fusion)
    r = run_cli("run", out, "--verify", transformer, "--repeat", "3", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["verify"]["ok"] and doc["verify"]["max_abs_err"] < 1e-4
    assert set(doc["latency_ms"]) >= {"median", "p90", "mean", "min", "max", "std"}
    assert doc["kernels"] == manifest["kernels"]


def test_fusion_reduces_kernels_on_light_model(tmp_path):
    path = light("squeezenet")
    kernels = {}
    for fusion in ("none", "tvm"):
        out = str(tmp_path / f"{fusion}.ftpkg")
        _, manifest = compile_model(path, out, target="llvm", fusion=fusion)
        kernels[fusion] = manifest["kernels"]
        r = run_cli("run", out, "--verify", path, "--repeat", "1", "--json")
        assert r.returncode == 0 and json.loads(r.stdout)["verify"]["ok"], r.stderr
    # squeezenet: 26 Conv+ReLU pairs fuse; unfused, each op is its own kernel
    assert kernels["tvm"] < kernels["none"] - 20


def test_run_cli_inputs_outputs_npz(cnn_package, cnn, tmp_path):
    x = np.random.default_rng(2).standard_normal((1, 3, 32, 32)).astype(np.float32)
    np.savez(tmp_path / "in.npz", input=x)
    r = run_cli(
        "run",
        cnn_package,
        "--inputs",
        str(tmp_path / "in.npz"),
        "--outputs",
        str(tmp_path / "out.npz"),
        "--verify",
        cnn,
        "--repeat",
        "2",
    )
    assert r.returncode == 0, r.stderr
    assert "median ms" in r.stdout and "PASS" in r.stdout
    out = np.load(tmp_path / "out.npz")["probs"]
    assert np.allclose(out.sum(), 1.0, atol=1e-5)


def test_mlp_dynamic_batch_bound(mlp, tmp_path):
    out = str(tmp_path / "mlp.ftpkg")
    r = run_cli("compile", mlp, "--input-shape", "x:3x32", "--target", "llvm", "-o", out)
    assert r.returncode == 0, r.stderr
    manifest, _ = read_package(out)
    assert manifest["inputs"][0]["shape"] == [3, 32] and manifest["outputs"][0]["shape"] == [3, 10]
    r = run_cli("run", out, "--verify", mlp, "--json", "--repeat", "1")
    assert r.returncode == 0 and json.loads(r.stdout)["verify"]["ok"]


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("model", ["cnn", "transformer", "light_squeezenet"])
def test_cuda_build_only_package(model, arch, models_dir, tmp_path):
    """CUDA packages carry nvcc-compiled device code for their arch, and every kernel is thread-bound."""
    from tuner.build.executable import cuda_graph_calls, thread_unbound_kernels
    from tuner.runtime.device_code import PackagedDeviceCode, cuda_sources, sha256

    path = light("squeezenet") if model.startswith("light_") else str(models_dir / f"{model}.onnx")
    out = str(tmp_path / "cuda.ftpkg")
    result, manifest = compile_model(path, out, target=f"cuda:{arch}", fusion="tvm")
    assert manifest["target"]["key"] == f"cuda-{arch}"
    assert thread_unbound_kernels(result.fused_mod) == []  # every kernel runs on the GPU, none as host code
    assert cuda_graph_calls(result.executable) > 0  # the kernel sequence is replayed as CUDA graphs
    entry = manifest["device_code"]
    assert entry["arch"] == arch and entry["format"] == "fatbin"
    _, members = read_package(out)
    blob = members[entry["member"]]
    assert blob[:4] == bytes.fromhex("50ed55ba") and arch.encode() in blob  # fatbin magic, code for the arch
    source = cuda_sources(result.executable)[0]
    assert entry["source_sha256"] == sha256(source)
    if shutil.which("cuobjdump"):
        (tmp_path / "k.fatbin").write_bytes(blob)
        listing = subprocess.run(
            ["cuobjdump", "--list-elf", str(tmp_path / "k.fatbin")], capture_output=True, text=True
        )
        assert arch in listing.stdout, listing.stdout + listing.stderr
    # what tuner.load registers: the packaged binary for this source, a clear error for any other
    serve = PackagedDeviceCode(out, entry, blob)
    assert serve(source) == blob
    with pytest.raises(TunerError, match="does not carry"):
        serve(source + "// changed")


def test_gpu_scheduling_leaves_the_unscheduled_module_alone(transformer):
    """dlight assigns into the module it is given; tuning extracts tasks from the same lowered module, and a
    scheduled kernel there hid the tensor-core design space (found with --dtype float16)."""
    from tuner.build.executable import schedule_for_gpu
    from tuner.core.target import resolve_target
    from tuner.frontend.onnx_model import prepare_model
    from tuner.fusion import get_strategy
    from tuner.pipeline import import_for, lower

    spec, strategy = resolve_target("cuda:sm_90"), get_strategy("tvm")
    mod, params, _ = import_for(prepare_model(transformer), strategy)
    fused = lower(mod, spec, strategy, params=params)
    before = fused.script(show_meta=False)
    scheduled = schedule_for_gpu(fused, spec)
    assert fused.script(show_meta=False) == before
    assert scheduled.script(show_meta=False) != before


def test_run_profile_shows_kernels_and_onnxruntime_nodes(cnn_package, cnn):
    r = run_cli("run", cnn_package, "--profile", "--verify", cnn, "--repeat", "2", "--json")
    assert r.returncode == 0, r.stderr
    prof = json.loads(r.stdout)["profile"]
    names = [k["name"] for k in prof["kernels"]]
    manifest, _ = read_package(cnn_package)
    launched = {n for n in names if not n.startswith("VM runtime")}
    assert launched and all(any(n.startswith(k) for k in manifest["kernel_names"]) for n in launched), names
    assert abs(sum(k["share"] for k in prof["kernels"]) - 1) < 1e-6
    assert {"Conv"} <= {n["op"] for n in prof["onnxruntime"]} and all(n["ms"] >= 0 for n in prof["onnxruntime"])
    # every kernel is attributed to its ONNX nodes, and ONNX Runtime's time for those nodes sits beside it
    kernels = [k for k in prof["kernels"] if not k["name"].startswith("VM runtime")]
    assert all(k["onnx_nodes"] and k["onnx_ops"] for k in kernels), kernels
    convs = [k for k in kernels if k["onnx_ops"].startswith("Conv")]
    assert convs and all(k["onnxruntime_ms"] and k["onnxruntime_ms"] > 0 for k in convs)
    # a layout transpose carries its conv's node, but the conv's time in ONNX Runtime goes to the conv kernel
    assert not any(k["onnxruntime_ms"] for k in kernels if k["onnx_ops"].startswith("layout Transpose")), kernels
    import onnx

    onnx_nodes = {n.name for n in onnx.load(cnn).graph.node}
    assert all(set(k["onnx_nodes"]) <= onnx_nodes for k in kernels)
    attributed = sum(k["onnxruntime_ms"] or 0 for k in kernels)
    assert attributed + sum(n["ms"] for n in prof["onnxruntime_unattributed"]) == pytest.approx(
        sum(n["ms"] for n in prof["onnxruntime"])
    )
    # lever 5 of issue 39: each conv's GFLOP/s from the FLOPs the manifest carries, against the CPU's peak
    assert prof["peak_gflops"] > 1 and "FMA loop" in prof["peak_how"]
    for k in convs:
        flops = manifest["kernel_flops"][k["name"]]
        assert k["gflops"] == pytest.approx(flops * k["calls"] / (k["ms"] * 1e6))
        assert k["of_peak"] == pytest.approx(k["gflops"] / prof["peak_gflops"])


def test_info_describes_a_package_without_loading_it(tuned_mlp):
    _, db, pkg = tuned_mlp
    r = run_cli("info", pkg, "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    manifest, _ = read_package(pkg)
    assert doc["kernels"] == manifest["kernels"] and doc["tuning_db"] == db
    assert doc["tuned_kernels"] == manifest["tuning_db"]["applied"]  # records that change a kernel
    assert doc["tuned_kernels"] + doc["default_scheduled"] + doc["other_kernels"] == doc["kernels"]
    assert doc["inputs"][0]["shape"] == [16, 32] and doc["target"] == manifest["target"]["key"]
    r = run_cli("info", pkg)
    assert r.returncode == 0 and "tuned" in r.stdout and "x:16x32" not in r.stdout


def test_run_for_a_duration_times_the_peers_beside_the_package(cnn_package, cnn):
    """trtexec-style: `--duration` runs for a wall time and reports p50/p90/p99 and throughput; with --verify on CPU,
    the peers are timed beside the package as tune-model times them (alternating blocks; ONNX Runtime as shipped
    is the headline, without spin-waiting beside it), and the comparison is worded from those samples."""
    r = run_cli("run", cnn_package, "--duration", "1s", "--verify", cnn, "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    lat, peers = doc["latency_ms"], doc["peers_ms"]
    assert lat["runs"] > 1 and lat["p99"] >= lat["p90"] >= lat["median"] and lat["throughput_per_s"] > 0
    assert {"package", "onnxruntime", "onnxruntime_no_spin"} <= set(peers) and doc["onnxruntime_ms"] == peers[
        "onnxruntime"
    ]
    assert doc["timing"]["method"].startswith("alternating blocks")
    ratio = peers["package"]["median"] / peers["onnxruntime"]["median"]
    assert doc["vs_onnxruntime"]["ratio"] == pytest.approx(ratio, rel=1e-6)  # the words are of these samples
    assert_worded(doc["vs_onnxruntime"])
    assert doc["vs_onnxruntime_no_spin"] == pytest.approx(
        peers["package"]["median"] / peers["onnxruntime_no_spin"]["median"]
    )
    text = run_cli("run", cnn_package, "--repeat", "5", "--verify", cnn)
    assert text.returncode == 0 and "ONNX Runtime as shipped" in text.stdout and "package" in text.stdout
    assert "alternating blocks" in text.stdout


def test_outputs_are_the_callers_own_arrays(tmp_path):
    """Inputs go through buffers kept per Model and outputs may alias them (a Reshape is a view in the VM): each
    call's outputs must survive the next call and writing into them must not reach the model."""
    import onnx
    from onnx import TensorProto, helper

    import tuner

    graph = helper.make_graph(
        [
            helper.make_node("Reshape", ["x", "shape"], ["flat"]),
            helper.make_node("Identity", ["w"], ["weight"]),
        ],
        "views",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [
            helper.make_tensor_value_info("flat", TensorProto.FLOAT, [6]),
            helper.make_tensor_value_info("weight", TensorProto.FLOAT, [3]),
        ],
        [
            helper.make_tensor("shape", TensorProto.INT64, [1], [6]),
            helper.make_tensor("w", TensorProto.FLOAT, [3], [1, 2, 3]),
        ],
    )
    path = str(tmp_path / "views.onnx")
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    compile_model(path, str(tmp_path / "v.ftpkg"), target="llvm")
    model = tuner.load(str(tmp_path / "v.ftpkg"))
    first = model(np.arange(6, dtype="float32").reshape(2, 3))
    first["weight"][:] = -1
    second = model(np.ones((2, 3), dtype="float32"))
    np.testing.assert_array_equal(first["flat"], np.arange(6, dtype="float32"))
    np.testing.assert_array_equal(second["flat"], np.ones(6, dtype="float32"))
    np.testing.assert_array_equal(second["weight"], [1, 2, 3])


def test_a_peer_that_cannot_read_the_model_is_left_out_with_its_reason(cnn, monkeypatch):
    """OpenVINO cannot read every model we build (silero-vad's If branches): `run --verify` and tune-model time
    the peers that can, and the timing notes say why the other is missing."""
    from tuner.report import reference
    from tuner.report.timing import timing_method
    from tuner.runtime.inputs import make_inputs

    def refuses(*_args, **_kwargs):
        raise RuntimeError("Exception from core.cpp\nConversion is failed for: Conv-16")

    monkeypatch.setattr(reference, "openvino_runner", refuses)
    import onnx

    specs = [{"name": i.name, "dtype": "float32", "shape": [d.dim_value for d in i.type.tensor_type.shape.dim]}
             for i in onnx.load(cnn).graph.input]  # fmt: skip
    failures = {}
    runners = reference.peer_runners(cnn, make_inputs(specs), 2, failures)
    assert set(runners) == {"onnxruntime", "onnxruntime_no_spin"}
    note = timing_method({k: [1.0] for k in runners}, failures)["openvino"]
    assert note.startswith("could not load the model") and "Conversion is failed for: Conv-16" in note
