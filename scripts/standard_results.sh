#!/usr/bin/env bash
# Run every experiment of the registry (`depthlab experiment --list --names`) at the
# `standard` budget, two at a time with one thread each on a 2-core machine (each
# writes OUT/NAME.log), and rewrite docs/results.md and the README's summary from the
# exports.
# Interrupt at will: the same command resumes where it stopped.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-runs/standard}
export OUT
mkdir -p "$OUT"
.venv/bin/depthlab experiment --list --names | xargs -P 2 -I NAME sh -c \
  '.venv/bin/depthlab experiment NAME --budget standard --out "$OUT" --no-progress > "$OUT/NAME.log" 2>&1'
.venv/bin/python scripts/update_readme_results.py "$OUT"
