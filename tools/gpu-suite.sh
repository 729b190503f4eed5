#!/usr/bin/env bash
# welchpeaks' device suite, one command on a lent GPU machine, from the repository root:
#
#   bash tools/gpu-suite.sh              # the real run: files under $OUT, a table last (<= 8 min)
#   OUT=/tmp/s bash tools/gpu-suite.sh --dry-run   # every step here, no GPU (CI runs this)
#
# Prepare the wheels the machine lacks first, here: bash tools/gpu-wheels.sh (they go to .whl/,
# which the device tool carries with carry=[".whl"]). What each step does, and what it writes:
# tools/gpu_suite.py and docs/performance.md ("The device suite").
set -uo pipefail
cd "$(dirname "$0")/.."
PY=$(command -v python3 || command -v python)
exec "$PY" tools/gpu_suite.py suite "$@"
