#!/usr/bin/env bash
# The v14 experiments (one device call runs some stages; A/B by environment variable, one build):
#   l2     the forward's long rows in two passes with L2 as the row buffer (softmax_fwd_l2.cuh;
#          JAX_MEMOPS_SOFTMAX_FWD=l2: 8-pack batches, evict-last loads in pass 1; l2-normal: default
#          caching; l2-b4: 4-pack batches) against the default (bulk-copy cluster; 8-pack block rows at
#          32768), f32 / bf16 32768 .. 131072, 40 MB of rows in flight, 1024-thread CTAs.
#   l2mb   JAX_MEMOPS_L2_MB (the rows in flight) 20 / 30 / 60 under l2.
#   l2half 512-thread CTAs (JAX_MEMOPS_L2_BLOCK=512, up to 2 per SM) under l2, 40 / 60 MB.
#   l2k    (round 2) 512-thread CTAs and clusters of them (JAX_MEMOPS_L2_K: k CTAs per row, a slice each),
#          f32 / bf16 50257 / 65536 / 131072: the default against l2-normal / l2 at k = 2, then k = 1 / 4
#          under each.
#   test   the l2 variants' GPU tests and the forward version tests.
#   ncu    Nsight Compute's DRAM bytes and L2 hit rate of l2 at f32 50257 / 131072, bf16 131072, the
#          default at f32 50257 and the copy.
set -uo pipefail
source "$(dirname "$0")/ab_lib.sh"

L2_COLS="--dtypes float32 bfloat16 --cols 32768 50257 65536 131072"

stage_build() { ab_build || exit 1; }

stage_l2() {
  ROUNDS=${ROUNDS:-1} JAX_MEMOPS_SOFTMAX_PLAN_LOG=1 ab_rounds l2 --versions "" l2 l2-normal l2-b4 $L2_COLS
  grep -h "l2 two-pass" "$out"/l2*.log | sort | uniq | cut -c1-120
}

stage_l2mb() {
  JAX_MEMOPS_SOFTMAX_FWD=l2 ROUNDS=1 ab_rounds l2mb --var JAX_MEMOPS_L2_MB --versions 20 30 60 $L2_COLS
}

stage_l2half() {
  JAX_MEMOPS_SOFTMAX_FWD=l2 JAX_MEMOPS_L2_BLOCK=512 JAX_MEMOPS_SOFTMAX_PLAN_LOG=1 ROUNDS=1 \
    ab_rounds l2half --var JAX_MEMOPS_L2_MB --versions 40 60 $L2_COLS
  grep -h "l2 two-pass" "$out"/l2half*.log | sort | uniq | cut -c1-120
}

stage_l2k() {
  local cols="--dtypes float32 bfloat16 --cols 50257 65536 131072"
  JAX_MEMOPS_L2_BLOCK=512 JAX_MEMOPS_L2_K=2 JAX_MEMOPS_SOFTMAX_PLAN_LOG=1 ROUNDS=1 \
    ab_rounds l2k2- --versions "" l2-normal l2 $cols
  for v in l2-normal l2; do
    JAX_MEMOPS_SOFTMAX_FWD=$v JAX_MEMOPS_L2_BLOCK=512 JAX_MEMOPS_SOFTMAX_PLAN_LOG=1 ROUNDS=1 \
      ab_rounds l2k-$v- --var JAX_MEMOPS_L2_K --versions 1 4 $cols
  done
  grep -h "l2 two-pass" "$out"/l2k*.log | sort | uniq | cut -c1-120
}

stage_test() {
  ab_gpu_tests pytest-v14 400 "${TESTS:-fwd_l2 or fwd_versions}" 300
  grep -E "^(FAILED|ERROR)" "$out/pytest-v14.log" | cut -c1-200
  return 0
}

stage_ncu() {
  local m=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct
  for run in "l2:softmax:fwd:float32:50257:ours softmax:fwd:float32:131072:ours softmax:fwd:bfloat16:131072:ours" \
             ":softmax:fwd:float32:50257:ours copy"; do
    JAX_MEMOPS_SOFTMAX_FWD=${run%%:*} XLA_PYTHON_CLIENT_PREALLOCATE=false XLA_PYTHON_CLIENT_ALLOCATOR=platform \
      timeout 120 ncu --profile-from-start off --clock-control none --metrics $m \
      python3 benchmarks/ncu_profile.py ${run#*:} >> "$out/ncu.txt" 2>&1
  done
  grep -E "^  [a-zA-Z_v]|duration|dram__bytes|hit_rate" "$out/ncu.txt" | cut -c1-150
}

ab_init "$@"
ab_run ab-v14
