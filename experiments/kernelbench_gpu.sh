#!/usr/bin/env bash
# One device call of the KernelBench benchmark on the H200: (optionally) the GPU tests of the kernel families, then
# `workbench kernelbench` over the stratified sample, resumed from the state an earlier call brought back.
# The sample's files travel in .kb/ (a copy of ../shared/kernelbench's sampled files, ignored by git: the files are
# not ours to commit), wheels they import in .kbwheels/ (einops); the state (out directory + store) travels in .kbstate/state.tar.gz and comes back in $OUT.
#   GPU_TESTS=1  run the lock-respecting GPU tests beside the benchmark (GPU_TESTS_S, default 420 s); =first: before it
#   KB_S         seconds left to the benchmark (default 420); KB_BUDGET  GPU-s of search per file (default 8)
#   KB_LEVELS    levels to run now (default all of the sample); KB_ONLY  files of those (names or globs, comma-separated)
#   GPU_TEST_FILES  the GPU test files to run (default: the lock-respecting set below)
#   BENCH_AB=1   also measure throughput with the reference cache off and on (experiments/bench_harness.py)
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 WORKBENCH_HOME=/tmp/wbhome
mkdir -p "$OUT" /tmp/kbrun
# wheels the files import that the device lacks (einops: the Mamba2 files), carried in .kbwheels/ (no network there)
if ls .kbwheels/*.whl > /dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --target /tmp/kbpy .kbwheels/*.whl && export PYTHONPATH=$PWD:/tmp/kbpy
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv > "$OUT/gpu.txt" 2>&1
if [ -f .kbstate/state.tar.gz ]; then tar xzf .kbstate/state.tar.gz -C /tmp; fi
# A card with no measured ceilings (the roofline floor, the copy-bandwidth test) gets them now, while the GPU is idle;
# they come back in $OUT/ceilings/ to be committed under results/ceilings/.
if ! python3 -c "import sys, torch; from workbench.core import ceilings; sys.exit(0 if ceilings.load(torch.cuda.get_device_name()) else 1)"; then
  timeout 180 python3 experiments/measure_ceilings.py > "$OUT/ceilings.log" 2>&1 && mkdir -p "$OUT/ceilings" && \
    cp results/ceilings/*.json "$OUT/ceilings/"
fi
# The GPU tests that share the GPU only through the per-GPU evaluation lock (every stage they time holds it, as the
# benchmark's do), so they may run beside the benchmark without disturbing its timings (GPU_TESTS=1: in parallel).
# If ncu fails under the driver's isolation, the two narrower modes are tried to find what ncu needs.
gpu_tests() {
  WORKBENCH_KERNELBENCH=$PWD/.kb timeout "${GPU_TESTS_S:-420}" python3 -m pytest -m gpu ${GPU_TEST_FILES:-tests/test_isolation.py \
    tests/test_gpu.py tests/test_gpu_graph_launch.py tests/test_kernelbench.py tests/test_gpu_profiling.py \
    tests/test_kernels_gemm.py tests/test_kernels_reduce.py tests/test_kernels_conv.py tests/test_kernels_conv_transpose.py} -v -rA -s -p no:cacheprovider \
    --timeout 240 > "$OUT/gpu_tests.log" 2>&1
  cp /tmp/wbhome/isolation.json "$OUT/" 2>/dev/null
  if grep -q "FAILED tests/test_gpu_profiling.py::test_ncu" "$OUT/gpu_tests.log"; then
    for mode in files network none; do
      WORKBENCH_NCU_ISOLATION=$mode timeout 120 python3 -m pytest -m gpu tests/test_gpu_profiling.py -k ncu_counters \
        -q -rA -p no:cacheprovider > "$OUT/ncu_isolation_$mode.log" 2>&1
    done
  fi
}
# the machine's isolation level, probed once here (the jobs below then read it from the home)
timeout 300 python3 -c "from workbench.devices.worker import isolation_level; print(isolation_level({'CUDA_VISIBLE_DEVICES': '0'}))" \
  > "$OUT/isolation_probe.txt" 2>&1
cat "$OUT/isolation_probe.txt"
if [ "${GPU_TESTS:-0}" = 1 ]; then gpu_tests & fi
# GPU_TESTS=first: the tests alone, before the benchmark (when a benchmark file's multi-GB tensors would crowd them)
if [ "${GPU_TESTS:-0}" = first ]; then gpu_tests; fi
# BENCH_AB=1: quick-fidelity throughput with the workers' reference cache off and on (lock-respecting too)
if [ "${BENCH_AB:-0}" = 1 ]; then
  timeout 300 python3 experiments/bench_harness.py --skip-full-timing --reference-cache-ab --compile-workers 4 \
    --out "$OUT/bench_harness.json" > "$OUT/bench_harness.log" 2>&1 &
fi
levels=()
[ -n "${KB_LEVELS:-}" ] && levels=(--levels "$KB_LEVELS")
[ -n "${KB_ONLY:-}" ] && levels+=(--only "$KB_ONLY")
timeout -s INT "${KB_S:-420}" python3 -m workbench.cli kernelbench .kb --sample results/kernelbench/sample.json \
  "${levels[@]}" --device cuda --budget-gpu-s "${KB_BUDGET:-8}" --out /tmp/kbrun/run \
  --store /tmp/kbrun/store.sqlite > "$OUT/kernelbench.log" 2>&1
echo "kernelbench rc $?"
# the state first (the call's own time limit may end the tests below): one archive, as many files do not come back
tar czf "$OUT/state.tar.gz" -C /tmp kbrun
tail -30 "$OUT/kernelbench.log"
wait
