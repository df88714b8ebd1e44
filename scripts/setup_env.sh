#!/usr/bin/env bash
# Create ./.venv (once) and install workbench into it. The venv sees the system's packages, so on a GPU machine the
# CUDA build of torch and its triton already there are used; elsewhere the CPU build of torch 2.13.0 is installed.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
  python3 -m venv --system-site-packages .venv
fi
. .venv/bin/activate
python -m pip install -q --upgrade pip
python -c "import torch" 2>/dev/null || python -m pip install -q torch==2.13.0
python -m pip install -q -e ".[test]"
