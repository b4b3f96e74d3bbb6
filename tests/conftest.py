import json
import os
import subprocess
import sys
import tempfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
os.environ.setdefault("TVM_NUM_THREADS", "2")
# tests tune cold: the curated schedules/ library of this machine's target would change what they measure
os.environ["FUSION_TUNER_SCHEDULES"] = os.path.join(os.path.dirname(__file__), "no-schedules-library")
# tests never read or fill the user's tuning cache (~/.cache/fusion-tuner): each session has its own
os.environ["FUSION_TUNER_CACHE"] = tempfile.mkdtemp(prefix="fusion-tuner-test-cache-")


@pytest.fixture(scope="session")
def models_dir(tmp_path_factory):
    """The synthetic models, freshly made (they are generated, not committed)."""
    import make_models

    d = tmp_path_factory.mktemp("models")
    make_models.main(["-o", str(d)])
    return d


@pytest.fixture(scope="session")
def cnn(models_dir):
    return str(models_dir / "cnn.onnx")


@pytest.fixture(scope="session")
def transformer(models_dir):
    return str(models_dir / "transformer.onnx")


@pytest.fixture(scope="session")
def mlp(models_dir):
    return str(models_dir / "mlp.onnx")


def _compiled(model: str, tmp_path_factory, name: str) -> str:
    from tuner.commands.compile import compile_model

    out = str(tmp_path_factory.mktemp("pkg") / name)
    compile_model(model, out, target="llvm", fusion="tvm")
    return out


@pytest.fixture(scope="session")
def cnn_package(cnn, tmp_path_factory):
    return _compiled(cnn, tmp_path_factory, "cnn.ftpkg")


@pytest.fixture(scope="session")
def tuned_mlp(mlp, tmp_path_factory):
    """The MLP at batch 16 tuned with 16 trials: (summary, database folder, package). Tests copy before changing."""
    d = tmp_path_factory.mktemp("tune")
    db = str(d / "db")
    r = run_cli(
        "tune-model",
        mlp,
        "--input-shape",
        "x:16x32",
        "--target",
        "llvm",
        "--trials",
        "16",
        "--db",
        db,
        "--seed",
        "1",
        "-o",
        str(d / "mlp.ftpkg"),
        "--json",
    )
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout), db, str(d / "mlp.ftpkg")


def run_cli(*args, env=None, timeout=600):
    """Run the real console entry point in a fresh process; returns CompletedProcess."""
    return subprocess.run(
        [sys.executable, "-m", "tuner.cli.main", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        timeout=timeout,
    )


def light(name):
    from devtools.zoo import light_models_dir

    return os.path.join(light_models_dir(), f"light_{name}.onnx")


def save_onnx(path: str, nodes: list, inputs: dict, outputs: dict, initializers: list) -> str:
    """A small opset-13 float32 ONNX model: `inputs`/`outputs` map names to shapes. Returns `path`."""
    import onnx
    from onnx import TensorProto, helper

    def infos(shapes):
        return [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(s)) for n, s in shapes.items()]

    graph = helper.make_graph(nodes, os.path.basename(path), infos(inputs), infos(outputs), initializers)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    return path


def assert_matches_onnxruntime(executable, model: str, feed: dict, tol: float = 1e-4):
    """The built executable's first output on `feed` (name -> array, in input order) against ONNX Runtime's."""
    import numpy as np
    import onnxruntime as ort
    import tvm
    from tvm import relax

    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feed)[0]
    got = relax.VirtualMachine(executable, tvm.cpu())["main"](*[tvm.runtime.tensor(v) for v in feed.values()])
    got = (got[0] if not hasattr(got, "numpy") else got).numpy()
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


@pytest.fixture(scope="session")
def bert_ids(models_dir):
    """A BERT-style encoder: input_ids (1000 rows), attention_mask, token_type_ids (2 rows), int64 1x16."""
    return str(models_dir / "bert_ids.onnx")


@pytest.fixture(scope="session")
def bert_package(bert_ids, tmp_path_factory):
    return _compiled(bert_ids, tmp_path_factory, "bert.ftpkg")


def assert_worded(cmp: dict) -> None:
    """A comparison (core.stats.compare_stats) says the ratio it measured, as "N.NN× faster/slower" or "within
    noise (N.NN×, ...)" only for a ratio within the noise band."""
    import re

    from tuner.core.stats import NOISE_BAND

    said = float(re.search(r"(\d+\.\d\d)×", cmp["words"]).group(1))
    ratio = cmp["ratio"]
    assert said == round(ratio if cmp["within_noise"] or ratio >= 1 else 1 / ratio, 2), cmp
    assert cmp["within_noise"] == cmp["words"].startswith("within noise"), cmp
    if cmp["within_noise"]:
        assert 1 / NOISE_BAND <= ratio <= NOISE_BAND, cmp
    else:
        assert ("faster" in cmp["words"]) == (ratio < 1), cmp


@pytest.fixture(scope="session")
def line_reader(models_dir):
    return str(models_dir / "line_reader.onnx")


@pytest.fixture(scope="session")
def seq_encoder(models_dir):
    return str(models_dir / "seq_encoder.onnx")


@pytest.fixture(scope="session")
def line_reader_package(line_reader, tmp_path_factory):
    from tuner.commands.compile import compile_model
    from tuner.core.shapes import DimRange

    out = str(tmp_path_factory.mktemp("ranged") / "line_reader.ftpkg")
    _, manifest = compile_model(line_reader, out, target="llvm", shapes={"image": (1, 3, 16, DimRange(8, 512))})
    return out, manifest


def conv_relu_task(x_shape, w_shape, padding: int = 0):
    """An NHWC conv (OHWI weights) with a bias + ReLU epilogue, as one fused kernel: (MetaSchedule's task, the
    host's target spec)."""
    import tvm
    from tvm import relax
    from tvm.s_tir import meta_schedule as ms

    from tuner.core.target import resolve_target

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(x_shape, "float32"))
    w = relax.Var("w", relax.TensorType(w_shape, "float32"))
    b = relax.Var("b", relax.TensorType((1, 1, 1, w_shape[0]), "float32"))
    with bb.function("main", [x, w, b]):
        with bb.dataflow():
            conv = relax.op.nn.conv2d(x, w, padding=padding, data_layout="NHWC", kernel_layout="OHWI")
            z = bb.emit_output(relax.op.nn.relu(relax.op.add(bb.emit(conv), b)))
        bb.emit_func_output(z)
    seq = [relax.transform.LegalizeOps(), relax.transform.AnnotateTIROpPattern(), relax.transform.FuseOps()]
    mod = relax.transform.FuseTIR()(tvm.transform.Sequential(seq)(bb.get()))
    target = resolve_target("llvm")
    (task,) = ms.relax_integration.extract_tasks(mod, target.tvm_target())
    assert "conv2d" in task.task_name and "relu" in task.task_name, task.task_name
    return task, target
