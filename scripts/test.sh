#!/usr/bin/env bash
# The test suite: set up, then run every test (GPU tests are marked `gpu` and skip where no GPU is visible).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
exec .venv/bin/python -m pytest -q "$@"
