"""The house rules, checked: imports point one way, modules and functions stay small."""

import ast
import pathlib
import subprocess
import sys

from conftest import ROOT

TUNER = pathlib.Path(ROOT) / "tuner"


def test_no_import_circle_among_tuner_modules():
    r = subprocess.run([sys.executable, "scripts/import_graph.py", "tuner"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0 and "cycles: none" in r.stdout, r.stdout


def test_modules_and_functions_stay_small():
    long_modules, long_functions = [], []
    for path in TUNER.rglob("*.py"):
        text = path.read_text()
        if text.count("\n") > 380:
            long_modules.append(f"{path.relative_to(ROOT)}: {text.count(chr(10))} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno >= 90:
                long_functions.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}")
    assert not long_modules and not long_functions, long_modules + long_functions


def test_passes_and_strategies_do_not_import_reports():
    """Fusion, lowering, plan, tuning and build take their IR helpers from tuner.ir, never from comparison/."""
    for sub in ("fusion", "plan", "tuning", "runtime"):
        for path in (TUNER / sub).rglob("*.py"):
            assert "comparison" not in "".join(
                line for line in path.read_text().splitlines() if line.strip().startswith(("from ", "import "))
            ), path
