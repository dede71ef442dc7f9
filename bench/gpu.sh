#!/usr/bin/env bash
# The GPU benchmark in one command (<= 10 minutes): MFU of a 124M-parameter config and
# tokens/s of the course model on the CUDA device present; one line and exit 0 without one.
#   bash bench/gpu.sh [--steps 30] [--no-compile]
set -euo pipefail
cd "$(dirname "$0")/.."
PY=python3
[ -x .venv/bin/python ] && PY=.venv/bin/python
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
exec timeout 600 "$PY" bench/gpu.py "$@"
