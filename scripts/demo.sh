#!/usr/bin/env bash
# Set everything up and run the main job on the bundled CNN: bash scripts/demo.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export TVM_NUM_THREADS=${TVM_NUM_THREADS:-$(nproc)}
FT=.venv/bin/fusion-tuner
.venv/bin/python scripts/make_models.py cnn
mkdir -p out
$FT check models/cnn.onnx
if $FT tune-model --help >/dev/null 2>&1; then
  $FT tune-model models/cnn.onnx --target llvm --trials 32 -o out/cnn.ftpkg
else
  $FT compile models/cnn.onnx --target llvm -o out/cnn.ftpkg
fi
$FT run out/cnn.ftpkg --verify models/cnn.onnx
echo
echo "package: out/cnn.ftpkg   (load it with: python -c \"import tuner; print(tuner.load('out/cnn.ftpkg'))\")"
