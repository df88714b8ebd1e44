#!/usr/bin/env bash
# The main job: set up, then a short headless sweep of kernel searches, screened against unscreened at equal budget
# (notebook 01 on cross_entropy: the roofline surrogate or none x 3 seeds, greedy, 15 GPU-seconds each;
# experiments/screening_sweep.yaml) and a self-contained HTML report of it (results/runs/screening/report.html): the
# best-speedup curves of both, the surrogate's calibration on what the GPU then measured, the failures, the best
# run's tree and a link to each run's notebook. With a GPU the searches measure for real; without one they replay the
# NVIDIA H200 measurements shipped in results/dataset and say so (every number was measured there; a candidate never
# measured is never estimated). Extra arguments go to `workbench sweep` (e.g. --jobs 1); SWEEP=experiments/x.yaml
# runs another sweep (experiments/replay_sweep.yaml: greedy against MCTS). A single search:
# .venv/bin/workbench search cross_entropy
set -euo pipefail
cd "$(dirname "$0")/.."
SWEEP="${SWEEP:-experiments/screening_sweep.yaml}" exec bash scripts/sweep_report.sh "$@"
