#!/usr/bin/env bash
# The v6 experiments in one GPU lease: three calls of <= 10 min each (the later two on the warm machine,
# which keeps the build); the stages' own timeouts bound each call:
#   bash benchmarks/ab_v6.sh build test           # ~35 + ~220 s (timeouts 240 + 260)
#   bash benchmarks/ab_v6.sh ab                   # ~200 s (timeouts 90 + 80 + 90 + 80)
#   bash benchmarks/ab_v6.sh ncu sanitize         # ~60 + ~150 s
# What is asked (benchmarks/RESULTS.md, "v4 and v5"):
#   grid   JAX_MEMOPS_GRID=persistent|full: the row kernels with a persistent grid (the resident CTAs) or
#          one CTA per row group. Predicted: short rows gain where one CTA's store tail idles the SM
#          (softmax f32 C = 128-2048 at 0.93-0.97x XLA). Measured: full 3-10% faster for the forward
#          register kernels (softmax, norms), now their default; the backward's classes A/B'd here too.
#   bf16   long rows: registers without spills (unpack_fresh; v5 spilled 42-50 bytes) and one buffer
#          with 16-byte shared loads (v5-s1; v5's sum and output passes took 2-byte loads) against the
#          recorded v5 (2.48 / 2.26 / 2.33 TB/s at 32768 / 50257 / 131072). The default (v5) now takes
#          the buffer where its cluster is smaller than the registers' (the plan log shows which ran).
#   ncu    the long-row kernels (f32 131072, bf16 32768 and 131072) and the softmax f32 1024 class,
#          beside XLA and the copy.
# (A bulk-copy backward, y and dy in shared memory, was measured here at 0.87-1.00x of the register
# cluster class and left on branch v6: RESULTS.md, "v6".)
# Logs under $OUT (else ./ab-out); a summary table at the end of each stage.
set -uo pipefail
source "$(dirname "$0")/ab_lib.sh"
stage_build() { ab_build || exit 1; }

# the whole GPU suite, then the fresh-process version tests (versions, grids, plans, norms)
stage_test() {
  ab_gpu_tests pytest 240 "gpu and not slow"
  ab_gpu_tests pytest-versions 260 "gpu and (fwd_versions or cluster_plans or fwd_grid or norm_forward_versions)" 180
}

stage_ab() {
  timeout 90 python3 benchmarks/softmax_ab.py --var JAX_MEMOPS_GRID --versions persistent full \
    --out "$out/grid-softmax" > "$out/grid-softmax.log" 2>&1
  timeout 80 python3 benchmarks/softmax_ab.py --var JAX_MEMOPS_GRID --versions persistent full \
    --ops layer_norm rms_norm --out "$out/grid-norms" > "$out/grid-norms.log" 2>&1
  JAX_MEMOPS_SOFTMAX_PLAN_LOG=1 timeout 90 python3 benchmarks/softmax_ab.py --versions v5 v5-s1 v3 \
    --dtypes bfloat16 float16 --cols 32768 50257 131072 --out "$out/long16" > "$out/long16.log" 2>&1
  timeout 80 python3 benchmarks/softmax_ab.py --var JAX_MEMOPS_GRID --versions persistent full --dirs bwd \
    --out "$out/grid-bwd" > "$out/grid-bwd.log" 2>&1
  grep -h "^|" "$out"/grid-softmax.log "$out"/grid-norms.log "$out"/long16.log "$out"/grid-bwd.log
  grep -h "plan:" "$out"/long16.log | sort -u
}

stage_ncu() {
  XLA_PYTHON_CLIENT_PREALLOCATE=false XLA_PYTHON_CLIENT_ALLOCATOR=platform timeout 240 \
    ncu --profile-from-start off --clock-control none --section SpeedOfLight --section Occupancy \
    --section WarpStateStats --section LaunchStats --section MemoryWorkloadAnalysis \
    python3 benchmarks/ncu_profile.py softmax:fwd:float32:131072 softmax:fwd:bfloat16:32768 \
    softmax:fwd:bfloat16:131072 softmax:fwd:float32:1024 copy > "$out/ncu.txt" 2>&1
  grep -E "^  [a-z_]|Duration|DRAM Throughput|Achieved Occupancy|Registers Per|Issued Warp" "$out/ncu.txt" | head -80
}

stage_sanitize() {
  T_SAN=200 bash benchmarks/gpu_check.sh sanitize | tail -6
}

ab_init "$@"
ab_run ab-v6
