#!/usr/bin/env bash
# A short headless sweep that writes an HTML report: notebook 01 over 2 strategies x 3 seeds on cross_entropy
# (experiments/replay_sweep.yaml, 15 GPU-seconds per search). Without a GPU it replays the NVIDIA H200 measurements
# shipped in results/dataset (every number was measured there; nothing is estimated); with one it measures for real.
# Writes results/runs/replay/<run_id>/ (manifest, executed notebook, events, trajectory) and the self-contained
# report results/runs/replay/report.html (plotly.js inlined: open it in any browser, no network needed). With
# Chromium present it also saves a screenshot of the report next to it (report.png).
# Runs that already finished are skipped (a sweep resumes); SWEEP=experiments/other.yaml picks another sweep,
# OUT=dir another root. Extra arguments go to `workbench sweep` (e.g. --jobs 1).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
SWEEP="${SWEEP:-experiments/replay_sweep.yaml}"
OUT="${OUT:-results/runs}"
NAME="$(.venv/bin/python -c 'import sys; from workbench.lab.sweep_config import load_sweep; print(load_sweep(sys.argv[1]).name)' "$SWEEP")"
.venv/bin/workbench sweep "$SWEEP" --out "$OUT" "$@"
.venv/bin/workbench report "$OUT/$NAME" --out "$OUT/$NAME/report.html"
if .venv/bin/python -c 'import sys; from workbench.lab.browser import find_chromium; sys.exit(find_chromium() is None)'; then
  .venv/bin/python -c 'import sys; from workbench.lab.browser import screenshot; print(screenshot(sys.argv[1], sys.argv[2]))' \
    "$OUT/$NAME/report.html" "$OUT/$NAME/report.png"
fi
