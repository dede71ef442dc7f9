#!/usr/bin/env bash
# Set up (with test tools) and run the whole test suite: lint, then pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --dev
.venv/bin/ruff check depthlab tests bench scripts
.venv/bin/python -m pytest "$@"
