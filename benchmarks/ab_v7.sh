#!/usr/bin/env bash
# The v7 experiments in one GPU lease: two calls of < 10 min each (the second on the warm machine, which
# keeps the build); the stages' own timeouts bound each call:
#   bash benchmarks/ab_v7.sh build test           # ~45 + ~240 + ~200 s (timeouts 250 + 250)
#   bash benchmarks/ab_v7.sh ab ncu               # ~260 + ~40 s
# What is asked (benchmarks/RESULTS.md, "v6"):
#   wide   JAX_MEMOPS_SOFTMAX_FWD=v7-512: the bulk-copy cluster with 512-thread CTAs (v5's rule and
#          variants). Predicted: each CTA's three shared-memory passes (f32 one buffer) take half as long,
#          so the stretch with no row in flight shrinks: +3-8% at f32 50257 / 131072; and 16-bit rows fit
#          8 register packs per thread at half the k of 256-thread CTAs (bf16 131072: k = 4 through
#          registers, where v6 took one buffer at k = 4).
#   grid   JAX_MEMOPS_GRID=persistent|full for the backward (v6 measured full -1 to +7% at C <= 8192 in
#          one run): a second run, with fwd+bwd, to decide the backward's default.
#   gelu   JAX_MEMOPS_GRID=full for the elementwise kernels (gelu forward and backward, the unfused
#          chain): one block per 256 threads' batch instead of a grid capped at 32 blocks per SM that
#          strides. Predicted +1-4% (f32 gelu forward sits at 94% of the copy, 0.94-0.96x XLA's fusion).
#   ncu    bf16 LayerNorm forward (75-85% of the copy, where RMSNorm bf16 reaches 90-93% and f32 LayerNorm
#          90-96%: issue-bound at twice the elements per byte?), f32 softmax backward at 50257 (80%).
# Logs under $OUT (else ./ab-out); a summary at the end of each stage. Outcomes: RESULTS.md, "v7".
set -uo pipefail
source "$(dirname "$0")/ab_lib.sh"
stage_build() { ab_build || exit 1; }

# the whole GPU suite, then the fresh-process tests of the A/B switches (versions, grids, plans)
stage_test() {
  ab_gpu_tests pytest 250 "gpu and not slow"
  ab_gpu_tests pytest-versions 250 "gpu and (fwd_versions or cluster_plans or test_gpu_grid or elementwise_grid)" 240
}

stage_ab() {
  JAX_MEMOPS_SOFTMAX_PLAN_LOG=1 timeout 100 python3 benchmarks/softmax_ab.py --versions v5 v7-512 \
    --cols 8192 16384 32768 50257 131072 262144 --out "$out/wide" > "$out/wide.log" 2>&1
  timeout 100 python3 benchmarks/softmax_ab.py --var JAX_MEMOPS_GRID --versions persistent full \
    --dirs bwd fwd+bwd --cols 128 512 1024 2048 4096 8192 --out "$out/grid-bwd" > "$out/grid-bwd.log" 2>&1
  timeout 80 python3 benchmarks/softmax_ab.py --var JAX_MEMOPS_GRID --versions persistent full --ops gelu \
    --dirs fwd bwd --out "$out/grid-gelu" > "$out/grid-gelu.log" 2>&1
  grep -h "^|" "$out"/wide.log "$out"/grid-bwd.log "$out"/grid-gelu.log
  grep -h "plan:" "$out"/wide.log | sort -u
}

stage_ncu() {
  XLA_PYTHON_CLIENT_PREALLOCATE=false XLA_PYTHON_CLIENT_ALLOCATOR=platform timeout 200 \
    ncu --profile-from-start off --clock-control none --section SpeedOfLight --section Occupancy \
    --section WarpStateStats --section LaunchStats --section MemoryWorkloadAnalysis \
    python3 benchmarks/ncu_profile.py layer_norm:fwd:bfloat16:768 layer_norm:fwd:bfloat16:12288:ours \
    rms_norm:fwd:bfloat16:768:ours layer_norm:fwd:float32:768:ours softmax:bwd:float32:50257:ours copy \
    > "$out/ncu.txt" 2>&1
  grep -E "^  [a-zA-Z_v]|Duration|DRAM Throughput|Achieved Occupancy|Registers Per|Issued Warp|Warp Cycles Per Issued" \
    "$out/ncu.txt" | head -80
}

ab_init "$@"
ab_run ab-v7
