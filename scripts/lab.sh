#!/usr/bin/env bash
# Set up a fresh machine and run depthlab's main job on the bundled default.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/depthlab lab "$@"
