#!/usr/bin/env bash
# The v38 device calls (RESULTS.md "v38"): the softmax backward's long rows planned by launch_bwd_v38 (cpp/softmax.cu:
# 4 or 5 packs per thread on 512-thread CTAs, then 16 CTAs of 1024 threads where the stream class ran), against the
# rule before it (JAX_MEMOPS_SOFTMAX_BWD=v35); then v36's odd norm teams (JAX_MEMOPS_NORM_BWD=v36), which v37's calls
# left unmeasured. Two calls: `ab_v38.sh build sab push stest`, then `ab_v38.sh build nab check`.
#   sab     benchmarks/softmax_ab.py over JAX_MEMOPS_SOFTMAX_BWD = v35, default (v38), softmax bwd, f32 and bf16,
#           device timing, at the widths whose plan v38 changes (beside 131072, which it leaves alone).
#   push    the merge by messages at every k (JAX_MEMOPS_SOFTMAX_PUSH = 1) against the rule (messages from k = 4), at
#           16385 and 50257: whether bf16 50257 on 3 CTAs of 5 packs by messages beats 4 of 4 packs.
#   stest   the softmax backward's GPU tests: v38's and v37's plan tests, the merges, the grids and versions (fresh
#           processes), the size classes, many rows and special values in process.
#   check   the > 2^31-element softmax tests (v38's 262147 and 524288 among them) beside compute-sanitizer memcheck and
#           racecheck over the softmax backward kernels (sanitize.py, resumed where the tool crashes).
#   race    compute-sanitizer over cluster_race.py (racecheck: the rule, then messages at every k; memcheck), where
#           sanitize.py's racecheck stops (the tool's own error at its first cluster launch), beside the plan and merge
#           tests (a third call, after the backward's merge by messages from k = 2: `build race sab nab`).
#   nab     benchmarks/partials_ab.py under JAX_MEMOPS_NORM_BWD = v35, v36: bf16 bwd of both norms at the widths v36's
#           odd teams take, and at 4096 / 12288, which they leave alone.
set -uo pipefail
source "$(dirname "$0")/ab_lib.sh"

stage_sab() {
  timeout 300 python3 benchmarks/softmax_ab.py --var JAX_MEMOPS_SOFTMAX_BWD --versions v35 default \
    --dirs bwd --dtypes float32 bfloat16 --timing device \
    --cols ${SAB_COLS:-16385 50257 100000 131072 131073 196608 256000 262144 262147 327680 524288} \
    --out "$out/sab" > "$out/sab.log" 2>&1
  echo "rc=$?"
  grep -h "^|" "$out/sab.log"
}

stage_push() {
  timeout 120 python3 benchmarks/softmax_ab.py --var JAX_MEMOPS_SOFTMAX_PUSH --versions default 1 \
    --dirs bwd --dtypes float32 bfloat16 --timing device --cols ${PUSH_COLS:-16385 50257} --out "$out/push" \
    > "$out/push.log" 2>&1
  echo "rc=$?"
  grep -h "^|" "$out/push.log"
}

stage_stest() {
  ab_gpu_tests stest 300 "bwd_v38_clusters or bwd_wide_clusters or bwd_push_reduce or test_gpu_grid or \
bwd_versions or (gpu and softmax and (auto_size_classes_backward or auto_many_rows or special or nan_row or masked \
or huge_logits))" 280
  grep -E "^(FAILED|ERROR)" "$out/stest.log" | head -20
}

stage_check() {
  XLA_PYTHON_CLIENT_PREALLOCATE=false timeout 280 python3 -P -m pytest -v -rfEs --timeout 270 \
    -k "big_softmax_size_class" tests/test_gpu.py > "$out/big.log" 2>&1 &
  SAN_TRIES=2 ab_sanitize_resume memcheck v38 kns=softmax_bwd 220 --only softmax &
  SAN_TRIES=2 ab_sanitize_resume racecheck v38 kns=softmax_bwd 220 --only softmax
  wait
  grep -E "PASSED|FAILED|SKIPPED|ERROR" "$out/big.log" | sed 's/ *\[.*//' | tail -12
  tail -n 1 "$out/big.log"
}

stage_race() {
  ab_gpu_tests rtest 200 "bwd_v38_clusters or bwd_push_reduce or bwd_wide_clusters" 190 &
  ab_cluster_race v38
  wait
  grep -E "^(FAILED|ERROR)" "$out/rtest.log" | head -20
}

stage_nab() {
  # shellcheck disable=SC2086
  ab_norm_versions nab "v35 v36" --ops layer_norm rms_norm --dirs bwd \
    --cols ${AB_COLS:-2056 2304 3584 4104 4608 5000 5120 8200 9216 4096 12288} --dtypes bfloat16
}

ab_init "$@"
ab_run v38
