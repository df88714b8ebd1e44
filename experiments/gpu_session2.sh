#!/usr/bin/env bash
# Second device call of a session: GPU tests, harness benchmark, then the suite benchmark on a subset (resumable).
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 WORKBENCH_HOME=/tmp/wbhome
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv > "$OUT/gpu.txt" 2>&1
timeout 200 python3 -m pytest -m gpu tests/test_gpu.py -q -rA -p no:cacheprovider > "$OUT/gpu_tests.log" 2>&1
tail -3 "$OUT/gpu_tests.log"
timeout 120 python3 experiments/bench_harness.py --out "$OUT/bench_harness.json" > "$OUT/bench.log" 2>&1
tail -3 "$OUT/bench.log"
timeout "${SUITE_S:-300}" python3 experiments/bench_suite.py ${SUITE_PROBLEMS:-} --candidates "${SUITE_N:-6}" \
  --gpu-minutes 2 --out "$OUT/suite" > "$OUT/suite.log" 2>&1
python3 experiments/bench_suite.py --out "$OUT/suite" --table-only | tail -25
tail -5 "$OUT/suite.log"
