#!/usr/bin/env bash
# Device calls of one session, by name: `bash experiments/gpu_calls.sh dataset|bench|confirm|ray|tests` (outputs under
# $OUT).
# dataset: a smoke run of the benchmark path (max-autotune reference) on one small problem, then a resumable dataset
#          slice on both GPUs; only the rows new in this call come back (gzipped), to be appended here.
# bench:   the suite benchmark (best candidate vs eager, torch.compile, max-autotune), half the suite per GPU.
# confirm: the screening headline on the H200 (search_h200.py), then GPU tests on GPU 0 and the suite's profiles
#          (ncu) on GPU 1.
# ray:     the Ray device's scaling (experiments/ray_scaling.py): the same candidates through 1 and 2 GPUs, a search
#          on 1 and 2 GPUs, a GPU actor killed mid-run, and the same list through one LocalDevice.
# tests:   every GPU-marked test on GPU 0.
# final:   row_var_mean re-collected and re-benchmarked on GPU 1 (after its lowering changed), GPU tests on GPU 0.
# recollect: one problem ($PROBLEM) re-collected and re-benchmarked on GPU 0, after its partition changed (one GPU);
#          the new rows, the logs and the suite row come back in $OUT/recollect.tar.gz.
set -u
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 WORKBENCH_HOME=/tmp/wbhome
mkdir -p "$OUT"
nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv > "$OUT/gpu.txt" 2>&1
step=${1:?dataset, bench or confirm}
# the GPU machine has no lightgbm (the learned surrogate needs it for `confirm`): carry wheels in .whl/ (see the
# device README: pip download --python-version 3.12 ... lightgbm) and name .whl in the call's carry
if ! python3 -c "import lightgbm" 2>/dev/null && ls .whl/lightgbm-*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site:$PYTHONPATH
fi
# Ray is not on the GPU machine either, and its wheel is over what a call carries: .whl/ray/ holds ray's wheel
# unpacked without its Java jars, dashboard build and libraries (rllib, tune, train, serve, data, llm), as
# ray-min.tar.xz, plus the wheels of its dependencies; only the dependencies the machine lacks are installed.
if [ "$step" = ray ] && ! python3 -c "import ray" 2>/dev/null && [ -f .whl/ray/ray-min.tar.xz ]; then
  mkdir -p /tmp/raysite && tar xJf .whl/ray/ray-min.tar.xz -C /tmp/raysite
  python3 - <<'EOF'
import glob, importlib, os, subprocess, sys
module = {"attrs": "attr", "protobuf": "google.protobuf", "pyyaml": "yaml", "rpds_py": "rpds"}
missing = []
for w in sorted(glob.glob(".whl/ray/*.whl")):
    dist = os.path.basename(w).split("-")[0].lower()
    try:
        importlib.import_module(module.get(dist, dist))
    except ImportError:
        missing.append(w)
print("installing for ray:", [os.path.basename(w) for w in missing], flush=True)
if missing:
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                    "--target", "/tmp/raysite", *missing], check=True)
EOF
  export PYTHONPATH=/tmp/raysite:$PYTHONPATH
fi
if [ "$step" = confirm ] && ! python3 -c "import lightgbm" 2>/dev/null; then
  echo "confirm needs lightgbm on the GPU machine: carry .whl with its wheel (see the comment above)" >&2; exit 2
fi

if [ "$step" = dataset ]; then
  timeout 150 python3 experiments/bench_suite.py scale_shift_relu --candidates 0 --from-dataset 1 --compile-workers 2 \
    --out /tmp/smoke > "$OUT/smoke.log" 2>&1
  tail -4 "$OUT/smoke.log"
  mkdir -p /tmp/raw && cp results/dataset/raw/rows-gpu*.jsonl /tmp/raw/
  wc -l /tmp/raw/rows-gpu*.jsonl > "$OUT/before.txt"
  timeout "${COLLECT_S:-430}" python3 experiments/collect_dataset.py residual_layernorm embedding_gather \
    matmul_small_k_bf16 mlp swiglu_mlp causal_attention transformer_block --gpus 2 --per-problem 250 \
    --compile-workers 30 --deadline-s "${DEADLINE_S:-370}" --out /tmp/raw > "$OUT/collect.log" 2>&1
  for g in 0 1; do
    n=$(awk -v f="/tmp/raw/rows-gpu$g.jsonl" '$2 == f {print $1}' "$OUT/before.txt")
    tail -n +$((${n:-0} + 1)) "/tmp/raw/rows-gpu$g.jsonl" | gzip > "$OUT/new-rows-gpu$g.jsonl.gz"
  done
  cat /tmp/raw/runs.jsonl 2>/dev/null | tail -1 > "$OUT/run.json"
  tail -12 "$OUT/collect.log"
fi

if [ "$step" = bench ]; then
  mapfile -t all < <(python3 -c "from workbench.problems import builtin_names; print('\n'.join(builtin_names()))")
  half=()
  other=()
  for i in "${!all[@]}"; do if (( i % 2 == 0 )); then half+=("${all[$i]}"); else other+=("${all[$i]}"); fi; done
  for g in 0 1; do
    if [ $g = 0 ]; then set -- "${half[@]}"; else set -- "${other[@]}"; fi
    timeout "${BENCH_S:-540}" python3 experiments/bench_suite.py "$@" --candidates "${FRESH:-2}" --from-dataset 3 \
      --gpu-minutes 10 --compile-workers 6 --compile-modes "${MODES:-default,max-autotune}" --gpu $g --out "$OUT/suite$g" > "$OUT/bench$g.log" 2>&1 &
  done
  wait
  tail -3 "$OUT/bench0.log" "$OUT/bench1.log"
fi

if [ "$step" = confirm ]; then
  # PROBLEM:BUDGET pairs; each budget is the one the replay experiment gave that problem (results/search/runs.jsonl)
  for pb in ${CONFIRM:-bmm_bf16:4.65}; do
    p=${pb%%:*}
    timeout "${CONFIRM_S:-300}" python3 experiments/search_h200.py "$p" --surrogate-model "/tmp/wbhome/without-$p.pkl" \
      --train --budget-gpu-s "${pb##*:}" --wall-s "${CONFIRM_WALL:-200}" --gpus 2 --compile-workers 12 \
      --out /tmp/h200 >> "$OUT/confirm.log" 2>&1
  done
  tar czf "$OUT/h200.tgz" -C /tmp h200
  tail -8 "$OUT/confirm.log"
  [ "${CONFIRM_ONLY:-0}" = 1 ] && exit 0
  timeout "${TESTS_S:-240}" python3 -m pytest -m gpu tests/test_gpu.py tests/test_gpu_profiling.py \
    tests/test_kernels_gemm.py tests/test_kernels_reduce.py -q -rA -p no:cacheprovider > "$OUT/gpu_tests.log" 2>&1 &
  CUDA_VISIBLE_DEVICES=1 timeout "${PROFILE_S:-240}" python3 experiments/profile_suite.py --gpu 0 \
    --deadline-s "${PROFILE_DEADLINE:-200}" --out /tmp/profiles > "$OUT/profile.log" 2>&1 &
  wait
  tar czf "$OUT/profiles.tgz" -C /tmp profiles
  tail -4 "$OUT/gpu_tests.log"
  tail -4 "$OUT/profile.log"
fi

if [ "$step" = ray ]; then
  python3 -c "import ray; print('ray', ray.__version__)" || exit 3
  timeout "${RAY_S:-560}" python3 experiments/ray_scaling.py ${PHASES:-sweep:1 sweep:2 fault:2 search:1 search:2 local:1} \
    --per-problem "${PER_PROBLEM:-20}" --compile-workers "${COMPILE_WORKERS:-12}" --out /tmp/ray_scaling \
    > "$OUT/ray_scaling.log" 2>&1
  cp /tmp/ray_scaling/scaling.jsonl "$OUT/" 2>/dev/null
  tar czf "$OUT/ray_stores.tgz" -C /tmp/ray_scaling --exclude 'cache-*' .
  grep '^{' "$OUT/ray_scaling.log" | cut -c1-400
  tail -5 "$OUT/ray_scaling.log"
fi

if [ "$step" = tests ]; then
  timeout "${TESTS_S:-560}" python3 -m pytest -m gpu tests/test_gpu.py tests/test_gpu_profiling.py tests/test_kernels_*.py -q -rA -p no:cacheprovider > "$OUT/gpu_tests.log" 2>&1
  tail -40 "$OUT/gpu_tests.log"
fi

if [ "$step" = final ]; then
  # GPU 1: row_var_mean under its new lowering (var_mean was a torch call): a dataset slice, whose new rows come back
  # gzipped, then its suite-benchmark row from fresh candidates. GPU 0 meanwhile: the GPU tests named in $TESTS.
  (
    export CUDA_VISIBLE_DEVICES=1
    mkdir -p /tmp/raw && cp results/dataset/raw/rows-gpu*.jsonl /tmp/raw/
    wc -l /tmp/raw/rows-gpu0.jsonl | awk '{print $1}' > "$OUT/before0.txt"
    timeout "${COLLECT_S:-150}" python3 experiments/collect_dataset.py row_var_mean --gpus 1 --per-problem "${PER:-60}" \
      --compile-workers 12 --deadline-s "${DEADLINE_S:-110}" --out /tmp/raw > "$OUT/collect.log" 2>&1
    tail -n +$(($(cat "$OUT/before0.txt") + 1)) /tmp/raw/rows-gpu0.jsonl | gzip > "$OUT/new-rows-rvm.jsonl.gz"
    tail -1 /tmp/raw/runs.jsonl > "$OUT/run.json" 2>/dev/null
    timeout "${BENCH_S:-150}" python3 experiments/bench_suite.py row_var_mean --candidates "${FRESH:-24}" \
      --gpu-minutes 2 --compile-workers 12 --compile-modes default,max-autotune --gpu 0 --out "$OUT/suite_rvm" \
      > "$OUT/bench_rvm.log" 2>&1
  ) &
  CUDA_VISIBLE_DEVICES=0 timeout "${TESTS_S:-320}" python3 -m pytest -m gpu ${TESTS:-tests/test_gpu.py} \
    ${TESTS_K:+-k "$TESTS_K"} -v -rA --tb=short -p no:cacheprovider > "$OUT/gpu_tests.log" 2>&1
  wait
  grep -E "passed|failed|^FAILED|^ERROR" "$OUT/gpu_tests.log" | tail -15
  tail -3 "$OUT/collect.log" "$OUT/bench_rvm.log"
fi

if [ "$step" = recollect ]; then
  # the problem's old rows stay in the raw files until the export moves them aside; only new rows come back
  P=${PROBLEM:?the problem to re-collect}
  W=/tmp/recollect && mkdir -p $W/raw && cp results/dataset/raw/rows-gpu*.jsonl $W/raw/
  wc -l < $W/raw/rows-gpu0.jsonl > $W/before0.txt
  timeout "${COLLECT_S:-150}" python3 experiments/collect_dataset.py "$P" --gpus 1 --per-problem "${PER:-250}" \
    --compile-workers 12 --deadline-s "${DEADLINE_S:-120}" --out $W/raw > $W/collect.log 2>&1
  tail -n +$(($(cat $W/before0.txt) + 1)) $W/raw/rows-gpu0.jsonl > $W/new-rows-$P.jsonl
  tail -1 $W/raw/runs.jsonl > $W/run.json 2>/dev/null
  timeout "${BENCH_S:-150}" python3 experiments/bench_suite.py "$P" --candidates "${FRESH:-16}" \
    --gpu-minutes 2 --compile-workers 12 --compile-modes default,max-autotune --out $W/suite > $W/bench.log 2>&1
  tar czf "$OUT/recollect.tar.gz" -C $W new-rows-$P.jsonl run.json collect.log bench.log suite
  wc -l $W/new-rows-$P.jsonl; tail -3 $W/collect.log $W/bench.log
fi
