"""The seeded mutation fuzzer (devtools/fuzz.py) in the default run: 240 damaged models through `check`, the
buildable ones' verdict confirmed by `compile`, and a sample through the real CLI for exit codes."""

import os

import pytest
from conftest import run_cli

from devtools.fuzz import cases
from tuner.cli.help import EXIT_CODES
from tuner.core.errors import TunerError

CASES = cases(seed=16, n=240)


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory):
    """{case id: (path, 'buildable' | 'not buildable' | 'error: ...')} from check_model in this process."""
    from tuner.commands.check import check_model

    d = tmp_path_factory.mktemp("fuzz")
    out = {}
    for case_id, _, data in CASES:
        path = str(d / f"{case_id}.onnx")
        with open(path, "wb") as f:
            f.write(data)
        try:
            out[case_id] = (path, "buildable" if check_model(path).buildable else "not buildable")
        except TunerError as err:
            out[case_id] = (path, f"error: {err.message}")
        # anything else propagates: the test fails on it, naming the exception
    assert sorted(os.listdir(d)) == sorted(f"{c}.onnx" for c, _, _ in CASES)  # check wrote nothing beside them
    return out


def test_every_case_ends_in_a_verdict_or_a_clear_error(verdicts):
    assert len(verdicts) >= 200
    kinds = {v.split(":")[0] for _, v in verdicts.values()}
    assert kinds == {"buildable", "not buildable", "error"}  # the mutations reach all three
    for case_id, (_, v) in verdicts.items():
        assert "Traceback" not in v and "# Metadata omitted" not in v, (case_id, v)


def test_buildable_means_compile_gets_through(verdicts, tmp_path):
    from tuner.commands.compile import compile_model
    from tuner.runtime import load

    buildable = [(c, p) for c, (p, v) in sorted(verdicts.items()) if v == "buildable"]
    assert len(buildable) >= 6
    for case_id, path in buildable[:: max(1, len(buildable) // 6)][:6]:
        out = str(tmp_path / f"{case_id}.ftpkg")
        compile_model(path, out, target="llvm")
        model = load(out)
        model(**model.random_inputs())


def test_cli_sample_exit_codes_and_no_traceback(verdicts, tmp_path):
    expected = {"buildable": 0, "not buildable": 1, "error": 2}
    sample = sorted(verdicts.items())[::30]
    for case_id, (path, v) in sample:
        r = run_cli("check", path, timeout=120)
        assert r.returncode in EXIT_CODES and r.returncode == expected[v.split(":")[0]], (case_id, r.stderr)
        assert "Traceback" not in r.stderr + r.stdout and "internal error" not in r.stderr, case_id
        assert "BlockBuilder destroyed" not in r.stderr, case_id
