#!/usr/bin/env bash
# The test suite: set up (Chromium included, for the browser test), then run every test (GPU tests are marked `gpu`
# and skip where no GPU is visible).
set -euo pipefail
cd "$(dirname "$0")/.."
WORKBENCH_BROWSER=1 bash scripts/setup_env.sh
exec .venv/bin/python -m pytest -q "$@"
