#!/usr/bin/env bash
# One device call: ceilings, GPU tests, harness benchmark. Outputs under $OUT (and results/ on the device copy).
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 WORKBENCH_HOME=/tmp/wbhome
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv > "$OUT/gpu.txt" 2>&1
python3 -c "import torch, triton, numpy; print(torch.__version__, triton.__version__, numpy.__version__)" >> "$OUT/gpu.txt"
if [ "${STEP_CEIL:-1}" = 1 ]; then
  timeout 120 python3 experiments/measure_ceilings.py > "$OUT/ceilings.log" 2>&1; cp results/ceilings/*.json "$OUT/" 2>/dev/null
fi
if [ "${STEP_TESTS:-1}" = 1 ]; then
  timeout 300 python3 -m pytest -m gpu tests/test_gpu.py -q -rA -p no:cacheprovider > "$OUT/gpu_tests.log" 2>&1
fi
if [ "${STEP_BENCH:-1}" = 1 ]; then
  timeout 240 python3 experiments/bench_harness.py --out "$OUT/bench_harness.json" > "$OUT/bench.log" 2>&1
fi
tail -5 "$OUT/gpu_tests.log" 2>/dev/null; tail -30 "$OUT/bench.log" 2>/dev/null; cat "$OUT/gpu.txt"
