#!/usr/bin/env bash
# Build run_package against the headers and runtime libraries inside the installed apache-tvm and tvm-ffi wheels.
# usage: bash examples/cpp/build.sh [OUTPUT]   (default: examples/cpp/run_package; needs g++ with C++17)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:-$here/run_package}"
py="${PYTHON:-python}"
tvm_dir="$("$py" -c 'import os, tvm; print(os.path.dirname(tvm.__file__))')"
ffi_dir="$("$py" -c 'import os, tvm_ffi; print(os.path.dirname(tvm_ffi.__file__))')"
g++ -std=c++17 -O2 -pthread "$here/run_package.cc" -o "$out" \
  -I"$tvm_dir/include" -I"$ffi_dir/include" \
  -L"$tvm_dir/lib" -L"$ffi_dir/lib" -Wl,--no-as-needed -ltvm_runtime -ltvm_ffi -Wl,--as-needed \
  -Wl,-rpath,"$tvm_dir/lib" -Wl,-rpath,"$ffi_dir/lib"
echo "$out"
