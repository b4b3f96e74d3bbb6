"""Inputs nobody checked, through tuner.load in a fresh process: every call runs or is refused with a TunerError
(devtools/input_fuzz.py); no signal, no other exception, no hang."""

import subprocess
import sys

from conftest import ROOT


def test_fuzzed_inputs_run_or_are_refused(cnn_package, bert_package):
    r = subprocess.run(
        [sys.executable, "-m", "devtools.input_fuzz", cnn_package, bert_package, "--n", "120", "--seed", "3"],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    last_case = [ln for ln in r.stdout.splitlines() if ln.startswith("case ")][-1:]
    assert r.returncode == 0 and r.stdout.rstrip().endswith("0 findings"), (r.returncode, last_case, r.stdout[-3000:])
    # the index inputs were tried out of range, and refused
    assert "index_high: refused" in r.stdout and "index_low: refused" in r.stdout and "valid: ran" in r.stdout
