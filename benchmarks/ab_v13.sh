#!/usr/bin/env bash
# The v13 experiments (one device call runs some stages; A/B by environment variable, one build):
#   bash benchmarks/ab_v13.sh build test suite race final    (main: the tie rule adopted)
#   regs   (branch v13's copy of this script, where the variants stay) the forward's long rows (C >
#          32768) on register clusters merging (max, sum) by messages from k = 4 against the default
#          bulk-copy cluster: v13-regs / v13-regs-1024 (8 packs per thread, CTAs of 512 threads first or
#          of 1024), v13-pre (two 4-pack sets, the next row's loads in flight through each row's merge);
#          f32 / bf16 50257 .. 262144. Predicted from the backward's register clusters (88-97% of the
#          copy by messages, RESULTS "v12"): >= 88% at 131072.
#   tie    the bulk-copy planner's ties: JAX_MEMOPS_SOFTMAX_TIE unset (v13: the smallest k that merges by
#          messages) against "small" (v12: the smallest k; TIE_VERSIONS: other values), rounds (ROUNDS,
#          default two); rounds 2-3 ran on branch v13, before the rule was the default: "" / push / cap4.
#   test   the tie rule's plan test, the forward's merge and plan tests (TESTS overrides the -k expression).
#   suite  every softmax GPU test but the > 2^31-element ones.
#   race   compute-sanitizer racecheck (rule, PUSH=1) and memcheck over benchmarks/cluster_race.py (VARS:
#          extra environment, e.g. JAX_MEMOPS_SOFTMAX_FWD=v13-regs on branch v13).
#   final  the softmax figures at C = 32768, 50257, 131072 (every direction, f32 / bf16) for README.
#   ncu    Nsight Compute on the f32 long rows: the forward's bulk copy (131072), the backward's register
#          cluster (131072), the forward's 8-pack block rows (32768: no cluster) and the copy; NCU_VARS adds
#          environment (the session ran JAX_MEMOPS_SOFTMAX_FWD=v13-regs on branch v13 for its fwd case).
#   v5reg  the bulk-copy cluster's register variant for f32 too (JAX_MEMOPS_SOFTMAX_FWD=v5-reg) against the
#          default at f32 50257 .. 262144, one round (ROUNDS).
#   chan, normtest  (branch v13-chan's copy of this script, where the variant stays) the 16-bit LayerNorm
#          forward with its statistics in one reduction (Chan's merge) against the default, and its tests.
set -uo pipefail
source "$(dirname "$0")/ab_lib.sh"

stage_build() { ab_build || exit 1; }

stage_tie() {
  JAX_MEMOPS_SOFTMAX_PLAN_LOG=1 ab_rounds tie --var JAX_MEMOPS_SOFTMAX_TIE --versions "" ${TIE_VERSIONS:-small} \
    --dtypes float32 bfloat16 --cols 40000 50257 55000 65536 100000 131072
}

stage_test() {
  ab_gpu_tests pytest-v13 300 "${TESTS:-tie_rule or fwd_push_reduce or fwd_cluster_plans or bwd_push_reduce}" 250
  grep -E "^(FAILED|ERROR)" "$out/pytest-v13.log" | cut -c1-200
  return 0
}

stage_suite() {
  ab_gpu_tests pytest-softmax 420 "softmax and gpu and not big" 250
}

stage_race() { ab_cluster_race v13 ${VARS:-}; }

stage_final() { ab_softmax_final; }

stage_ncu() {
  env ${NCU_VARS:-} XLA_PYTHON_CLIENT_PREALLOCATE=false XLA_PYTHON_CLIENT_ALLOCATOR=platform timeout 150 \
    ncu --profile-from-start off --clock-control none --section SpeedOfLight --section Occupancy \
    --section WarpStateStats --section MemoryWorkloadAnalysis --section LaunchStats \
    python3 benchmarks/ncu_profile.py ${NCU_CASES:-softmax:fwd:float32:131072:ours softmax:bwd:float32:131072:ours \
    softmax:fwd:float32:32768:ours copy} > "$out/ncu.txt" 2>&1
  grep -E "^  [a-zA-Z_v]|Duration|DRAM Throughput|Achieved Occupancy|Warp Cycles Per Issued" "$out/ncu.txt" \
    | cut -c1-150
}

stage_v5reg() {
  ROUNDS=${ROUNDS:-1} JAX_MEMOPS_SOFTMAX_PLAN_LOG=1 ab_rounds v5reg --versions "" v5-reg --dtypes float32 \
    --cols 50257 65536 131072 262144
}

ab_init "$@"
ab_run ab-v13
