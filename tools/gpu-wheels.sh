#!/usr/bin/env bash
# Download, here, the wheels the lent GPU machines lack for the device suite (tools/gpu-suite.sh):
# CPython 3.12, manylinux x86-64, no dependencies (each one named). The machines have torch,
# triton 3.6.0, numpy, numba, scipy, typer, rich, pytest, pytest-xdist and hypothesis; they lack
# platformdirs (docs/performance.md, "The device suite"). The folder .whl/ is git-ignored and
# carried to the machine by the device tool (carry=[".whl"]); keep it far under 64 MiB.
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf .whl && mkdir -p .whl
python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d .whl "platformdirs>=4"
ls -l .whl
du -sh .whl
