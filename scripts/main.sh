#!/usr/bin/env bash
# The main job: set up, then run a short budget-aware kernel search (MCTS over the offline proposer's space) for the
# cross-entropy problem. On a machine with a GPU it measures for real; without one it replays the recorded NVIDIA
# H200 measurements shipped in results/dataset, and says so (candidates never measured are never estimated).
# Extra arguments go to `workbench search` (e.g. --strategy greedy --budget-gpu-s 30 --json).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
exec .venv/bin/workbench search "${PROBLEM:-cross_entropy}" --device auto --strategy mcts --budget-gpu-s 10 "$@"
