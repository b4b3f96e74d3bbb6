"""The Python API (tuner.tune / compile / compare / load): the commands as functions, on a tiny MLP."""

import os

import numpy as np
import pytest

import tuner
from tuner.core.errors import TunerError

SHAPES = {"x": (16, 32)}


def test_compile_tune_compare_and_load_from_python(mlp, tmp_path):
    summary = tuner.compile(mlp, str(tmp_path / "m.ftpkg"), target="llvm", shapes=SHAPES)
    assert summary["target"].startswith("llvm") and summary["kernels"] and summary["package"].endswith("m.ftpkg")

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
    assert {"untuned", "tuned", "onnxruntime", "onnxruntime_no_spin"} <= set(summary["latency_ms"])
    assert summary["vs_onnxruntime"] > 0 and summary["timing"]["method"].startswith("alternating blocks")
    model = tuner.load(summary["package"])
    x = np.random.default_rng(0).standard_normal((16, 32)).astype("float32")
    untuned = tuner.load(str(tmp_path / "m.ftpkg"))
    (a,), (b,) = model(x).values(), untuned(x).values()
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)

    doc = tuner.compare(mlp, str(tmp_path / "report"), target="llvm", shapes=SHAPES, repeat=3, ort=True)
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


@pytest.mark.parametrize(
    "api_name, cli_module", [("tune", "tune_model"), ("compile", "compile"), ("compare", "compare")]
)
def test_api_keywords_are_the_cli_options(api_name, cli_module):
    """The API and the CLI call the same command function: each option the CLI takes is a keyword of the API with
    the same default, and the other way round, so the two cannot drift."""
    import importlib
    import inspect

    renamed = {"input_shape": "shapes", "const": "consts", "no_verify": "verify", "tune_shape": "tune_shapes"}
    output_only = {"json", "quiet", "verbose", "debug", "help"}  # how the CLI prints, not what the command does
    empty = (None, (), [])
    parser = importlib.import_module(f"tuner.cli.{cli_module}").build_parser()
    cli = {renamed.get(a.dest, a.dest): a.default for a in parser._actions if a.dest not in output_only}
    cli["verify"] = not cli.get("verify", True) if "verify" in cli else None
    if cli["verify"] is None:
        del cli["verify"]
    params = inspect.signature(getattr(tuner, api_name)).parameters
    api = {n: p.default for n, p in params.items() if n != "log"}
    api.update({n: None for n, p in params.items() if p.default is inspect.Parameter.empty})  # positional
    assert set(api) == set(cli), f"API only: {set(api) - set(cli)}; CLI only: {set(cli) - set(api)}"
    differ = {n: (api[n], cli[n]) for n in api if api[n] != cli[n] and not (api[n] in empty and cli[n] in empty)}
    assert not differ, f"defaults differ (API, CLI): {differ}"


def test_a_duration_without_unit_is_refused():
    from tuner.core.units import parse_duration

    with pytest.raises(TunerError, match="needs its unit") as info:
        parse_duration("10", "--time-budget")
    assert "10s, 10m or 10h" in info.value.hint
    assert parse_duration("90s") == 90 and parse_duration("2m") == 120 and parse_duration(5) == 5.0
