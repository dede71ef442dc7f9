#!/usr/bin/env bash
# Run test files under several CPU kernels and thread counts: ATen's default (no SIMD),
# AVX2 and the machine's best, each on 1 and 2 torch threads, and MKL held to AVX2.
# Each kernel rounds in its own order, as another CPU would, so a numeric test that
# passes under all of them is not pinned to this machine's rounding. E.g.
#   bash scripts/test_kernels.sh tests/test_simulator_wiring.py tests/test_decode.py
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
status=0
for setting in "ATEN_CPU_CAPABILITY=default" "ATEN_CPU_CAPABILITY=avx2" \
               "MKL_ENABLE_INSTRUCTIONS=AVX2" "BEST="; do
  for threads in 1 2; do
    printf '%-30s threads %s: ' "${setting%=}" "$threads"
    out=$(env "$setting" OMP_NUM_THREADS=1 DEPTHLAB_TEST_THREADS=$threads PYTHONPATH="$PWD" \
          "$PY" -m pytest -p no:cacheprovider -m "not browser" "$@" 2>&1)
    rc=$?
    grep -E '[0-9]+ (passed|failed|error|deselected)' <<<"$out" | tail -n 1
    if [ "$rc" -ne 0 ] && [ "$rc" -ne 5 ]; then
      status=1
      grep -E '^(FAILED|ERROR)' <<<"$out"
    fi
  done
done
exit $status
