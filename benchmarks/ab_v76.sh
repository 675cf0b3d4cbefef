#!/usr/bin/env bash
# The v76 device call (RESULTS.md "v76 and v77"): JAX_MEMOPS_SOFTMAX_FWD=v76 (every one-buffer cluster's rows by
# tickets, at twice the rule's cluster size) against the default (v75 when this ran, at 356fd2a; since v77, the default
# is v76 for f32 rows), and its checks.
#   lib      this tree into site-packages, beside softmax_long_ab.cu built for sm_90.
#   long     softmax_long_ab over LONG_CASES (default f32 50257 .. 262144, bf16 100000 .. 262144), LONG_ROUNDS (default
#            1): the default against v76 and v75.
#   bench    the bench's forward (device timing) under the default and v76, ROUNDS (default 1), C = BENCH_COLS (default
#            32768 .. 262144), f32 and bf16.
#   check    beside each other: the GPU tests of v76 (its tickets over 1100 launches, its version test) and
#            compute-sanitizer racecheck (the merge rule; messages at every k) and memcheck over cluster_race.py under
#            v76, in the time left of a T_END (default 400) s call.
set -uo pipefail
here=$(dirname "$0")
source "$here/ab_lib.sh"

stage_harness() { ab_nvcc_harness softmax_long_ab.cu /tmp/softmax_long_ab cpp/softmax_ladder.cu; }

stage_lib() { ab_build_beside harness || return 1; }

stage_long() {
  LONG_ROUNDS=${LONG_ROUNDS:-1} ab_long_rounds v76,v75 \
    "${LONG_CASES:-f32:50257 f32:65536 f32:100000 f32:131072 f32:262144 bf16:100000 bf16:131072 bf16:262144}" 150
}

stage_bench() {
  ROUNDS=${ROUNDS:-1} AB_TIMEOUT=200 ab_rounds v76- --var JAX_MEMOPS_SOFTMAX_FWD --versions "" v76 --dirs fwd \
    --dtypes float32 bfloat16 --cols ${BENCH_COLS:-32768 50257 65536 100000 131072 262144} --timing device
}

stage_check() {
  local left=$((${T_END:-400} - SECONDS))
  left=$((left > 90 ? left : 90))
  ab_gpu_tests tests "$left" "${TESTS_K:-gpu and v76}" "$((left - 10))" &
  ab_cluster_race_beside "$((left - 5))" JAX_MEMOPS_SOFTMAX_FWD=v76
}

ab_init "$@"
ab_run v76
