#!/usr/bin/env bash
# Create .venv if missing and install fusion-tuner with its pinned dependencies (idempotent).
# As root with apt-get available, also installs the system packages the reports and examples need (Graphviz,
# Chromium, g++).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "[setup] creating .venv with $($PY --version)"
  "$PY" -m venv .venv
fi
stamp=.venv/.fusion-tuner-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  echo "[setup] installing fusion-tuner and its pinned dependencies"
  .venv/bin/python -m pip install -q --upgrade pip 2>&1 | grep -v "^WARNING: Location" || true
  .venv/bin/python -m pip install -q -e ".[test]" 2>&1 | grep -v "^WARNING: Location" || true
  .venv/bin/python -c "import tvm, tvm_ffi, onnx, onnxruntime, xgboost; print('[setup] tvm', tvm.__version__, '| tvm-ffi', tvm_ffi.__version__, '| onnx', onnx.__version__, '| ort', onnxruntime.__version__)"
  touch "$stamp"
fi
need_apt=()
command -v dot >/dev/null 2>&1 || need_apt+=(graphviz)
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
command -v g++ >/dev/null 2>&1 || need_apt+=(g++)  # examples/cpp: the C++ deployment example
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "[setup] apt-get install ${need_apt[*]}"
    apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
  else
    echo "[setup] missing system packages: ${need_apt[*]} (install them with your package manager)" >&2
  fi
fi
