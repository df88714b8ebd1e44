#!/usr/bin/env bash
# The test suite: set up (Chromium included, for the browser test), lint (ruff: pyflakes, pycodestyle, import order;
# settings in pyproject.toml), then run every test (GPU tests are marked `gpu` and skip where no GPU is visible).
set -euo pipefail
cd "$(dirname "$0")/.."
WORKBENCH_BROWSER=1 bash scripts/setup_env.sh
.venv/bin/ruff check .
exec .venv/bin/python -m pytest -q "$@"
