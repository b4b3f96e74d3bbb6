#!/usr/bin/env bash
# Set everything up and run the test suite: bash scripts/test.sh [pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export TVM_NUM_THREADS=${TVM_NUM_THREADS:-$(nproc)}
.venv/bin/python scripts/make_models.py >/dev/null
exec .venv/bin/python -m pytest "$@"
