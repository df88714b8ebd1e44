#!/usr/bin/env bash
# One diagnosis call on the GPU (outputs under $OUT): where the weakest sampled KernelBench files spend their time
# (experiments/kernel_breakdown.py), strict-fp32 GEMM variants on tensor cores (experiments/gemm_fp32_variants.py),
# and chosen GPU tests with full tracebacks (DIAG_TESTS, pytest node ids).
#   DIAG_FILES  KernelBench files (paths under .kb/); DIAG_N candidates per file (default 3)
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 WORKBENCH_HOME=/tmp/wbhome
mkdir -p "$OUT"
if ls .kbwheels/*.whl > /dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --target /tmp/kbpy .kbwheels/*.whl && export PYTHONPATH=$PWD:/tmp/kbpy
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv > "$OUT/gpu.txt" 2>&1
timeout "${GEMM_S:-150}" python3 experiments/gemm_fp32_variants.py --out "$OUT/gemm_fp32.json" > "$OUT/gemm_fp32.log" 2>&1
echo "gemm rc $?"; tail -5 "$OUT/gemm_fp32.log"
if [ -n "${DIAG_FILES:-}" ]; then
  timeout "${BREAKDOWN_S:-200}" python3 experiments/kernel_breakdown.py $DIAG_FILES --n "${DIAG_N:-3}" \
    --out "$OUT/breakdown.json" > "$OUT/breakdown.log" 2>&1
  echo "breakdown rc $?"
fi
if [ -n "${DIAG_TESTS:-}" ]; then
  timeout "${TESTS_S:-150}" python3 -m pytest -m gpu $DIAG_TESTS -v -rA -p no:cacheprovider --timeout 140 \
    > "$OUT/gpu_tests.log" 2>&1
  echo "tests rc $?"; tail -5 "$OUT/gpu_tests.log"
fi
