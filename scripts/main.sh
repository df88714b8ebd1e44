#!/usr/bin/env bash
# The main job: set up, then a short headless sweep of kernel searches (notebook 01: greedy and MCTS x 3 seeds on the
# cross-entropy problem, 15 GPU-seconds each) and a self-contained HTML report of it (results/runs/replay/report.html).
# With a GPU the searches measure for real; without one they replay the NVIDIA H200 measurements shipped in
# results/dataset and say so (every number was measured there; a candidate never measured is never estimated).
# Extra arguments go to `workbench sweep` (e.g. --jobs 1). A single search: .venv/bin/workbench search cross_entropy
set -euo pipefail
cd "$(dirname "$0")/.."
exec bash scripts/sweep_report.sh "$@"
