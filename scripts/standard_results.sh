#!/usr/bin/env bash
# Run every experiment at the `standard` budget (two at a time, one thread each,
# on a 2-core machine) and rewrite the README's Results section from the exports.
# Interrupt at will: the same command resumes where it stopped.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-runs/standard}
run() { for name in "$@"; do .venv/bin/depthlab experiment "$name" --budget standard --out "$OUT" --no-progress; done; }
mkdir -p "$OUT"
run residual stream-rms init-gradients > "$OUT/a.log" 2>&1 &
a=$!
run norm-placement norm-type attn-gate > "$OUT/b.log" 2>&1
wait $a
.venv/bin/python scripts/update_readme_results.py "$OUT"
