"""The house rules, checked: one package per stage of the data path, imports only downstream, small modules."""

import ast
import pathlib
import subprocess
import sys

from conftest import ROOT

TUNER = pathlib.Path(ROOT) / "tuner"

# The data path in order. A module may import its own stage, earlier stages and `core`; nothing later.
# `runtime` is the deploy boundary: a package loads with TVM's runtime and numpy, so it sits right after core.
STAGES = (
    "core",
    "runtime",
    "frontend",
    "transform",
    "legalize",
    "fusion",
    "pipeline",
    "schedule",
    "tuning",
    "build",
    "plan",
    "report",
    "commands",
    "api",
    "cli",
    "__init__",
)
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 80
MAX_TOP_LEVEL_MODULES = 3


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _stage(module: str) -> str:
    parts = module.split(".")
    return "__init__" if len(parts) == 1 else parts[1]


def _imports(path: pathlib.Path):
    """(line, imported tuner module) for every import in the file, function-local ones included."""
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            names = [f"{target}.{a.name}" for a in node.names]
            targets = [n for n in names if (TUNER.parent / (n.replace(".", "/") + ".py")).exists()] or [target]
        elif isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        else:
            continue
        for t in targets:
            if t == "tuner" or t.startswith("tuner."):
                yield node.lineno, t


def test_every_module_sits_in_a_stage():
    top = sorted(p.name for p in TUNER.glob("*.py"))
    assert len(top) <= MAX_TOP_LEVEL_MODULES, top
    unknown = sorted({_stage(_module_name(p)) for p in TUNER.rglob("*.py")} - set(STAGES))
    assert not unknown, f"packages not in STAGES: {unknown}"


def test_imports_point_downstream_only():
    """A stage imports only earlier stages (and core); the runtime imports only core."""
    bad = []
    for path in TUNER.rglob("*.py"):
        stage = _stage(_module_name(path))
        for line, target in _imports(path):
            other = _stage(target)
            allowed = other == stage or other == "core" or STAGES.index(other) < STAGES.index(stage)
            if stage == "runtime":
                allowed = other in ("core", "runtime")
            if target == "tuner":  # the root package (its __version__): only the command line reads it
                allowed = stage in ("cli", "__init__")
            if not allowed:
                bad.append(f"{path.relative_to(ROOT)}:{line} ({stage}) imports {target} ({other})")
    assert not bad, "\n".join(bad)


def test_core_imports_no_other_stage():
    for path in (TUNER / "core").rglob("*.py"):
        assert all(_stage(t) == "core" for _, t in _imports(path)), path


def test_no_import_circle_among_tuner_modules():
    r = subprocess.run([sys.executable, "scripts/import_graph.py", "tuner"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0 and "cycles: none" in r.stdout, r.stdout


def test_modules_and_functions_stay_small():
    long_modules, long_functions = [], []
    for path in TUNER.rglob("*.py"):
        text = path.read_text()
        if text.count("\n") > MAX_MODULE_LINES:
            long_modules.append(f"{path.relative_to(ROOT)}: {text.count(chr(10))} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES:
                    long_functions.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}")
    assert not long_modules and not long_functions, long_modules + long_functions


def test_onnx_runtime_sessions_come_from_one_factory():
    """compare, run, tune-model and the benchmarks time ONNX Runtime with the same settings: every session is
    made by tuner.report.reference.onnxruntime_session (the conformance runner sets its own, on purpose)."""
    allowed = {TUNER / "report" / "reference.py", pathlib.Path(ROOT) / "scripts" / "conformance.py"}
    paths = [*TUNER.rglob("*.py"), *(pathlib.Path(ROOT) / "scripts").glob("*.py")]
    direct = [str(p.relative_to(ROOT)) for p in paths if p not in allowed and "InferenceSession(" in p.read_text()]
    assert not direct, direct
