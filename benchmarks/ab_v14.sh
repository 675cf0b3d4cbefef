#!/usr/bin/env bash
# The v14 experiments (one device call runs some stages; A/B by environment variable, one build):
#   l2, l2mb, l2half, l2k, ncu  (branch v14-l2k's copy of this script, where the variants stay) the
#          forward's long rows in two passes with L2 as the row buffer: CTA size, batch, L2 hints, rows in
#          flight, clusters; Nsight Compute's DRAM bytes and L2 hit rate.
#   rounds the adopted rule (v14: 16-bit rows of 32768 < C whose rows in flight fit 56% of L2 take the
#          two-pass kernel; 60% in the session's rounds 1-2) against v9 (JAX_MEMOPS_SOFTMAX_FWD=v9),
#          ROUNDS (default two; the second round runs v9 first), bf16 / f16 40000 .. 80000.
#   share  the rule's bound: JAX_MEMOPS_SOFTMAX_L2_SHARE=100 (every 16-bit row whose rows in flight fit
#          L2) against 0 (v9's kernels), bf16 / f16 65536 .. 131072.
#   test   the rule's test, the forward version tests (v9 among them), the tie rule's test (under v9).
#   san    compute-sanitizer memcheck and racecheck over sanitize.py's softmax workload, the two-pass
#          kernel only (its class shapes include 16-bit 3 x 50257); racecheck crashes in the tool at f32
#          2 x 12288 (as in v11), hence
#   race   racecheck (the rule, PUSH=1) and memcheck over cluster_race.py (now with 16-bit two-pass rows).
#   big    the > 2^31-element long-row tests (bf16 131072 and 50257).
#   suite  every softmax GPU test but the > 2^31-element ones.
#   final  the softmax figures at C = 32768, 50257, 131072 (every direction, f32 / bf16) for README.
set -uo pipefail
source "$(dirname "$0")/ab_lib.sh"

stage_build() { ab_build || exit 1; }

stage_rounds() {
  local round vs
  for round in ${ROUNDS:-1 2}; do
    if [ "$round" = 2 ]; then vs=(v9 ""); else vs=("" v9); fi
    ROUNDS=$round JAX_MEMOPS_SOFTMAX_PLAN_LOG=1 ab_rounds rule --versions "${vs[@]}" --dtypes bfloat16 float16 \
      --cols 40000 50257 55000 65536 70001 80000
  done
}

stage_share() {
  JAX_MEMOPS_SOFTMAX_PLAN_LOG=1 ROUNDS=1 ab_rounds share --var JAX_MEMOPS_SOFTMAX_L2_SHARE --versions 100 0 \
    --dtypes bfloat16 float16 --cols 65536 80000 100000 131072
}

stage_test() {
  ab_gpu_tests pytest-v14 400 "${TESTS:-l2_rule or fwd_versions or tie_rule}" 300
  grep -E "^(FAILED|ERROR)" "$out/pytest-v14.log" | cut -c1-200
  return 0
}

stage_san() {
  local tool
  for tool in memcheck racecheck; do
    XLA_PYTHON_CLIENT_PREALLOCATE=false XLA_FLAGS=--xla_gpu_enable_command_buffer= timeout 200 \
      compute-sanitizer --tool $tool --kernel-name kns=softmax_fwd_l2 --error-exitcode 3 \
      python3 benchmarks/sanitize.py --only softmax > "$out/$tool-l2.log" 2>&1
    echo "$tool rc=$? $(grep -E 'SUMMARY|OK|checks' "$out/$tool-l2.log" | tail -2 | tr '\n' ' ')"
  done
}

stage_race() { ab_cluster_race v14; }

stage_big() {
  XLA_PYTHON_CLIENT_PREALLOCATE=false timeout 300 python3 -P -m pytest -v -rfEs --timeout 250 \
    -k "big_softmax_size_class" tests/test_gpu.py > "$out/pytest-big.log" 2>&1
  grep -E "PASSED|FAILED|SKIPPED|ERROR" "$out/pytest-big.log" | sed 's/ *\[.*//' | tail -4
  tail -n 1 "$out/pytest-big.log"
}

stage_suite() { ab_gpu_tests pytest-softmax 420 "softmax and gpu and not big" 250; }

stage_final() { ab_softmax_final; }

ab_init "$@"
ab_run ab-v14
