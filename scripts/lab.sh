#!/usr/bin/env bash
# Set up a fresh machine and run depthlab's main job on the bundled default.
# Progress and errors go to stdout with the rest, so `bash scripts/lab.sh > log`
# keeps a readable log: a line per set-up step, then plain progress lines at least
# every 20 s when it is not a terminal, a live bar when it is.
# Arguments go to `depthlab lab` (e.g. --port 8001 when port 8000 is taken).
set -euo pipefail
cd "$(dirname "$0")/.."
echo "lab: 1/2 set-up (scripts/setup.sh): a virtualenv in .venv, torch and depthlab..."
bash scripts/setup.sh 2>&1
echo "lab: 2/2 depthlab lab${*:+ $*}: train the quick residual experiment if its data are missing," \
  "import SmolLM2 once, then serve the page..."
exec .venv/bin/depthlab lab "$@" 2>&1
