#!/usr/bin/env bash
# Create ./.venv (once) and install workbench into it. The venv sees the system's packages, so on a GPU machine the
# CUDA build of torch and its triton already there are used; elsewhere the CPU build of torch 2.13.0 is installed.
# WORKBENCH_BROWSER=1 (scripts/test.sh sets it) also installs Debian's chromium when no Chromium is on PATH and apt-get
# can run (as root): the browser test opens the HTML sweep report in it.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
  python3 -m venv --system-site-packages .venv
fi
. .venv/bin/activate
python -m pip install -q --upgrade pip
python -c "import torch" 2>/dev/null || python -m pip install -q torch==2.13.0
python -m pip install -q -e ".[test]"
if [ "${WORKBENCH_BROWSER:-0}" = 1 ] && ! command -v chromium >/dev/null 2>&1 \
    && ! command -v chromium-browser >/dev/null 2>&1 && ! command -v google-chrome >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    echo "setup: installing Debian's chromium for the browser test (once; about 110 MB)" >&2
    apt-get update -q >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium >/dev/null
  else
    echo "setup: no Chromium and no root apt-get here: install chromium yourself, or the browser test fails in CI" \
         "(and is skipped elsewhere)" >&2
  fi
fi
