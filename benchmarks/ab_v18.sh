#!/usr/bin/env bash
# The v18 measurements (one device call runs some stages):
#   test   the GPU tests of the bulk-copy kernel's register variant on 1024-thread CTAs (JAX_MEMOPS_SOFTMAX_FWD=
#          v18: test_gpu_fwd_regs_full, the version tests); TESTS replaces the expression.
#   ab     v18 against the default in one build (one process per version), f32 / bf16, the long rows and
#          their neighbours (AB_COLS), ROUNDS rounds (default two), the plans logged.
#   s2     the two-buffer bulk-copy cluster (JAX_MEMOPS_SOFTMAX_FWD=v3) against the one buffer at k = 8
#          (the default's plan at f32 131072; v17 measured +2-3% in two rounds), ROUNDS rounds (default 3).
#   race   compute-sanitizer racecheck (the merge rule, PUSH=1) and memcheck over cluster_race.py under v18.
set -uo pipefail
source "$(dirname "$0")/ab_lib.sh"

stage_build() { ab_build || exit 1; }

stage_test() {
  ab_gpu_tests pytest-v18 300 "${TESTS:-regs_full or fwd_versions}" 250
  grep -E "^(FAILED|ERROR)" "$out/pytest-v18.log" | cut -c1-200
  return 0
}

stage_ab() {
  # shellcheck disable=SC2086
  JAX_MEMOPS_SOFTMAX_PLAN_LOG=1 ab_rounds "ab-r" --versions "" v18 --dtypes float32 bfloat16 \
    --cols ${AB_COLS:-16384 24576 32768 40000 50257 65536 131072}
}

stage_s2() {
  JAX_MEMOPS_SOFTMAX_FWD_K=8 JAX_MEMOPS_SOFTMAX_PLAN_LOG=1 ROUNDS=${ROUNDS:-1 2 3} ab_rounds "s2-k8-r" \
    --versions "" v3 --dtypes float32 --cols ${S2_COLS:-100000 131072}
}

stage_race() { ab_cluster_race v18 JAX_MEMOPS_SOFTMAX_FWD=v18; }

ab_init "$@"
ab_run ab-v18
