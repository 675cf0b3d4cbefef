#!/usr/bin/env bash
# The v18 measurements on main (branch v18 holds the 1024-thread register variant's driver):
#   ceiling  benchmarks/row_ceiling.cu, the long rows' structure without the softmax's arithmetic (standalone).
#   kb       f32 rows of 16384 < C <= 32768 on the one-buffer bulk-copy cluster (JAX_MEMOPS_SOFTMAX_FWD=v5) at
#            forced k (KS, default 2 4 8) against the default (v9's 8-pack block rows), ROUNDS rounds.
#   nbwd     Nsight Compute over the norms' fused backward (issue slots, warp states, memory throughput):
#            LayerNorm bf16 / f32 8192, RMSNorm bf16 8192, LayerNorm bf16 768 (NCU_CASES replaces them).
set -uo pipefail
source "$(dirname "$0")/ab_lib.sh"

stage_build() { ab_build || exit 1; }

stage_ceiling() {
  local inc
  inc=$(python3 -c "import jax.ffi; print(jax.ffi.include_dir())")
  nvcc -std=c++17 -O3 -arch=sm_90 -I"$inc" -Icpp benchmarks/row_ceiling.cu -o /tmp/row_ceiling &&
    /tmp/row_ceiling | tee "$out/row_ceiling.md"
}

stage_kb() {
  local k
  for k in ${KS:-2 4 8}; do
    # shellcheck disable=SC2086
    JAX_MEMOPS_SOFTMAX_FWD_K=$k JAX_MEMOPS_SOFTMAX_PLAN_LOG=1 ab_rounds "kb-k$k-r" --versions "" v5 \
      --dtypes float32 --cols ${KB_COLS:-24576 32768}
  done
}

stage_nbwd() {
  local cases=${NCU_CASES:-layer_norm:bwd:bfloat16:8192:ours layer_norm:bwd:float32:8192:ours \
    rms_norm:bwd:bfloat16:8192:ours layer_norm:bwd:bfloat16:768:ours}
  # shellcheck disable=SC2086
  XLA_PYTHON_CLIENT_PREALLOCATE=false XLA_PYTHON_CLIENT_ALLOCATOR=platform timeout 240 \
    ncu --profile-from-start off --clock-control none --kernel-name regex:norm_bwd_fused --section SpeedOfLight \
    --section ComputeWorkloadAnalysis --section WarpStateStats --section Occupancy --section MemoryWorkloadAnalysis \
    -f -o "$out/nbwd" python3 benchmarks/ncu_profile.py $cases > "$out/nbwd.log" 2>&1
  tail -2 "$out/nbwd.log"
  ncu -i "$out/nbwd.ncu-rep" --page details > "$out/nbwd.txt" 2>&1
  grep -E "^  [a-zA-Z_].*\(|Duration|DRAM Throughput|Issue Slots Busy|Issued Ipc Active|SM Busy|Achieved Occupancy|\
Warp Cycles Per Issued|No Eligible|Eligible Warps" "$out/nbwd.txt" | cut -c1-120
}

ab_init "$@"
ab_run ab-v18
