#!/usr/bin/env bash
# The main job: set up, then run the evaluation ladder over the shipped example candidates
# (on the GPU when one is visible; otherwise static, sm_90 compile and interpreter correctness at small shapes).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
exec .venv/bin/workbench demo "$@"
