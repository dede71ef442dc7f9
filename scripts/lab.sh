#!/usr/bin/env bash
# Set up a fresh machine and run depthlab's main job on the bundled default.
# Progress and errors go to stdout with the rest, so `bash scripts/lab.sh > log`
# keeps a readable log: plain progress lines at least every 20 s when it is not a
# terminal, a live bar when it is.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh 2>&1
exec .venv/bin/depthlab lab "$@" 2>&1
