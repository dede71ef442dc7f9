#!/usr/bin/env bash
# The GPU benchmark in one command (<= 10 minutes): tokens/s, MFU and peak memory of a
# 124M GPT-2-shaped and a 124M course-shaped model, trained with train.parallel=fsdp, bf16
# and torch.compile on every visible GPU (torchrun, one process per GPU); one line and
# exit 0 without a GPU.
#   bash bench/gpu.sh [--steps 30] [--no-compile]      (PYTHON=... picks the interpreter)
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
[ -z "${PYTHON:-}" ] && [ -x .venv/bin/python ] && PY=.venv/bin/python
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
GPUS=$("$PY" -c "import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)")
if [ "$GPUS" -eq 0 ]; then
    exec "$PY" bench/gpu.py "$@"  # says there is no GPU, exits 0
fi
exec timeout 600 "$PY" -m torch.distributed.run --standalone --nproc_per_node="$GPUS" \
    bench/gpu.py "$@"
