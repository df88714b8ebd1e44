#!/usr/bin/env bash
# JupyterLab on the notebooks (jupytext opens the py:percent files as notebooks).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
.venv/bin/python -m pip install -q -e ".[widgets,test]"
exec .venv/bin/jupyter lab notebooks/ "$@"
