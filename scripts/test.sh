#!/usr/bin/env bash
# Set up (with test tools) and run the whole test suite: lint, then pytest.
#   --quick   leave out the tests marked slow (each over ~5 s: training runs, SmolLM2,
#             subprocess trainers) and the browser tests: a few minutes while editing.
# Any other arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
select=()
if [[ "${1:-}" == "--quick" ]]; then
  shift
  select=(-m "not slow and not browser")
fi
bash scripts/setup.sh --dev
.venv/bin/ruff check depthlab tests bench scripts
.venv/bin/python -m pytest "${select[@]}" "$@"
