#!/usr/bin/env bash
# One device call whose work depends on the card that came (calls cannot pick H200 over H100):
#   H200: the KernelBench benchmark's 60-file sample (experiments/kernelbench_gpu.sh, resumed from .kbstate/), so the
#         whole table is measured on the card the issues name, with one version of the code;
#   other cards: what does not need the H200 -- the GPU tests, the suite's conv_net against torch.compile, and the
#         dataset's KernelBench slice for that card (collect_dataset.py resumed from .kbstate/raw-<card>/).
# Knobs: TESTS=1 (GPU_TEST_FILES, default tests/test_gpu.py; beside the benchmark on the H200, alone first elsewhere), CONV_NET=1 (non-H200),
#   KB_S / COLLECT_S seconds for the benchmark / the collection, PRECISION_AB seconds per precision (non-H200).
# Everything that must come back is under $OUT.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 WORKBENCH_HOME=/tmp/wbhome
mkdir -p "$OUT"
card=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "card: $card"
if [[ "$card" == *H200* ]]; then
  if [ "${TESTS:-0}" = 1 ]; then
    # lock-respecting: every stage they time holds the per-GPU evaluation lock, as the benchmark's stages do
    timeout "${GPU_TESTS_S:-420}" python3 -m pytest -m gpu tests/test_gpu.py -q -rA -p no:cacheprovider \
      > "$OUT/gpu_tests.log" 2>&1 &
  fi
  GPU_TESTS=0 KB_S=${KB_S:-480} bash experiments/kernelbench_gpu.sh
  wait
  tail -4 "$OUT/gpu_tests.log" 2>/dev/null
  exit 0
fi
slug=$(echo "$card" | tr 'A-Z ' 'a-z-' | tr -cd 'a-z0-9-')
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv > "$OUT/gpu.txt" 2>&1
if [ "${TESTS:-0}" = 1 ]; then
  timeout "${GPU_TESTS_S:-230}" python3 -m pytest -m gpu ${GPU_TEST_FILES:-tests/test_gpu.py} -q -rA -p no:cacheprovider \
    > "$OUT/gpu_tests.log" 2>&1
  tail -4 "$OUT/gpu_tests.log"
fi
if [ "${CONV_NET:-0}" = 1 ]; then
  timeout "${CONV_NET_S:-240}" python3 experiments/bench_suite.py conv_net --candidates 12 --gpu-minutes 1 \
    --compile-modes default --out "$OUT/suite" > "$OUT/suite.log" 2>&1
  python3 experiments/bench_suite.py --out "$OUT/suite" --table-only | tail -5
fi
# PRECISION_AB=S: the same conv files collected under "torch" (cudnn_tf32: cuDNN's tf32 on, tf32 conv kernels) and
# "strict" in one call, S seconds each: the GPU check of HARNESS_VERSION 11 and the ratios under both rules
if [ "${PRECISION_AB:-0}" -gt 0 ]; then
  ab=".kbc/level1/50_conv_standard_2D__square_input__square_kernel.py .kbc/level2/4_Conv2d_Mish_Mish.py"
  ab="$ab .kbc/level1/67_conv_standard_1D.py .kbc/level2/31_Conv2d_Min_Add_Multiply.py"
  for p in torch strict; do
    timeout $((PRECISION_AB + 60)) python3 experiments/collect_dataset.py $ab --per-problem 8 --precision $p \
      --deadline-s "$PRECISION_AB" --out "$OUT/precision-$p-$slug" > "$OUT/precision-$p.log" 2>&1
    tail -4 "$OUT/precision-$p.log"
  done
fi
if [ "${COLLECT_S:-0}" -gt 0 ]; then
  raw="$OUT/raw-$slug"
  mkdir -p "$raw"
  [ -d ".kbstate/raw-$slug" ] && cp .kbstate/raw-"$slug"/* "$raw"/
  # 45_Average_Pooling_2D first: its one row failed on the harness's memory fault (HARNESS_VERSION 9)
  timeout $((COLLECT_S + 60)) python3 experiments/collect_dataset.py .kbc/level1/45_Average_Pooling_2D.py \
    $(grep -v 45_Average_Pooling_2D .kbc/order.txt) --per-problem 24 --deadline-s "$COLLECT_S" --out "$raw" \
    > "$OUT/collect.log" 2>&1
  tail -3 "$OUT/collect.log"
fi
