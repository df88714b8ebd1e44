#!/usr/bin/env bash
# JupyterLab on the notebooks (jupytext opens the py:percent files as notebooks: right-click, Open With -> Notebook;
# saving writes the .py back unchanged apart from your edits). Extra arguments go to `jupyter lab` (e.g. --port 8890,
# --no-browser on a remote machine). As root (containers, GPU boxes) Lab refuses to start without --allow-root,
# which this script then adds.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
.venv/bin/python -m pip install -q -e ".[widgets,test]"
extra=()
if [ "$(id -u)" = 0 ]; then
  extra+=(--allow-root)
fi
exec .venv/bin/jupyter lab notebooks/ "${extra[@]}" "$@"
