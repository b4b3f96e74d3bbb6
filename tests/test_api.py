"""The Python API (tuner.tune / compile / compare / load): the commands as functions, on a tiny MLP."""

import os

import numpy as np
import pytest

import tuner
from tuner.errors import TunerError

SHAPES = {"x": (16, 32)}


def test_compile_tune_compare_and_load_from_python(mlp, tmp_path):
    manifest = tuner.compile(mlp, str(tmp_path / "m.ftpkg"), target="llvm", shapes=SHAPES)
    assert manifest["target"]["kind"] == "llvm" and manifest["kernels"]

    summary = tuner.tune(
        mlp,
        str(tmp_path / "t.ftpkg"),
        trials=4,
        target="llvm",
        shapes=SHAPES,
        db=str(tmp_path / "db"),
        schedules="none",
    )
    assert summary["trials"] >= 1 and summary["verify"]["ok"], summary
    assert set(summary["latency_ms"]) == {"untuned", "tuned", "onnxruntime"} and summary["vs_onnxruntime"] > 0
    model = tuner.load(summary["package"])
    x = np.random.default_rng(0).standard_normal((16, 32)).astype("float32")
    untuned = tuner.load(str(tmp_path / "m.ftpkg"))
    (a,), (b,) = model(x).values(), untuned(x).values()
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)

    doc = tuner.compare(mlp, str(tmp_path / "report"), target="llvm", shapes=SHAPES, repeat=3)
    assert list(doc["variants"]) == ["none", "tvm"] and doc["verdict"] and doc["reference"]["onnxruntime"]
    assert all(v["status"] == "ok" for v in doc["variants"].values())
    assert os.path.exists(tmp_path / "report" / "report.html")


def test_api_errors_name_the_argument(mlp, tmp_path):
    with pytest.raises(TunerError, match="time_budget 'ten minutes'"):
        tuner.tune(mlp, str(tmp_path / "t.ftpkg"), time_budget="ten minutes", target="llvm", shapes=SHAPES)
    assert not os.path.exists(tmp_path / "t.ftpkg")


def test_api_functions_survive_importing_every_submodule():
    """`tuner.compare` stays the function once the report package is imported (it used to be shadowed by it)."""
    import importlib
    import pkgutil

    for info in pkgutil.walk_packages(tuner.__path__, "tuner."):
        if not info.name.startswith("tuner.cli.main"):
            importlib.import_module(info.name)
    assert callable(tuner.compare) and callable(tuner.tune) and callable(tuner.compile)
