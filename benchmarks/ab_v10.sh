#!/usr/bin/env bash
# The v10 experiments (one device call runs some stages; A/B by environment variable, one build):
#   bash benchmarks/ab_v10.sh build verify test sanitize
# Measured and removed (benchmarks/RESULTS.md, "v10"; branches v10, v10-pipe): v9-ring (the softmax
# one-buffer bulk copy refilled in parts) and v10-pipe (norm team rows staged through shared memory by bulk
# copies; 0.72-0.90x of the default).
#   verify    16-bit team rows of 6 packs where they need as many threads per row as 8 (C <= 199,
#             264-391, 520-775, 1032-1543; then the default for LayerNorm and RMSNorm) against v3 (8 packs,
#             the rule before), bf16 / f16, at 128, 768 and 1536, twice (two processes per version: the
#             noise). Adopted for LayerNorm only (RMSNorm: 0.87-1.15x at 768).
#   test      the norm version tests (fresh processes), the GPU norm suite, the > 2^31-element team rows.
#   review    the fresh-process version tests (each A/B switch parsed by env_choice) on the GPU.
#   sanitize  compute-sanitizer memcheck and racecheck over the norms' part of sanitize.py's workload.
# Prepared for the next lease:
#   ncu       Nsight Compute on what sits near 80% of the copy: the softmax forward's long rows (bulk-copy
#             cluster, f32 50257 / 131072, bf16 131072) and bf16 LayerNorm 1024 / 2048 (v3's team and block
#             rows), beside the copy. NCU_NORM_FWD=v10-pipe4 (on branch v10-pipe) profiles the pipeline's
#             ~2.3 TB/s instead of the default norm kernels. Wanted: achieved occupancy against the
#             theoretical, DRAM throughput, the top warp stall reasons.
set -uo pipefail
source "$(dirname "$0")/ab_lib.sh"

stage_build() { ab_build || exit 1; }

stage_verify() {
  local round
  for round in 1 2; do
    timeout 120 python3 benchmarks/softmax_ab.py --var JAX_MEMOPS_NORM_FWD --ops layer_norm rms_norm \
      --versions v3 "" --dtypes bfloat16 float16 --cols 128 768 1536 --out "$out/verify$round" \
      > "$out/verify$round.log" 2>&1
    grep -h "^|" "$out/verify$round.log"
  done
}

stage_test() {
  ab_gpu_tests pytest-norm 280 "norm_forward_versions or (gpu and not slow and norm)" 200
  XLA_PYTHON_CLIENT_PREALLOCATE=false timeout 120 python3 -P -m pytest -q -rfEs -k "big_norm_team_rows" \
    tests/test_gpu.py > "$out/pytest-big-team.log" 2>&1
  tail -n 1 "$out/pytest-big-team.log"
}

stage_review() {
  ab_gpu_tests pytest-review 240 "(gpu and slow and not big) or norm_forward_versions" 200
}

stage_sanitize() {
  local tool
  for tool in memcheck racecheck; do
    XLA_PYTHON_CLIENT_PREALLOCATE=false XLA_FLAGS=--xla_gpu_enable_command_buffer= \
      timeout 120 compute-sanitizer --tool $tool --kernel-name kns=norm --error-exitcode 3 \
      python3 benchmarks/sanitize.py --only layer_norm rms_norm > "$out/$tool-norms.log" 2>&1
    echo "$tool rc=$? $(grep -E 'SUMMARY|passed' "$out/$tool-norms.log" | tail -2 | tr '\n' ' ')"
  done
}

stage_ncu() {
  JAX_MEMOPS_NORM_FWD=${NCU_NORM_FWD:-} XLA_PYTHON_CLIENT_PREALLOCATE=false XLA_PYTHON_CLIENT_ALLOCATOR=platform \
    timeout 240 ncu --profile-from-start off --clock-control none --section SpeedOfLight --section Occupancy \
    --section WarpStateStats --section LaunchStats --section MemoryWorkloadAnalysis \
    python3 benchmarks/ncu_profile.py softmax:fwd:float32:50257:ours softmax:fwd:float32:131072:ours \
    softmax:fwd:bfloat16:131072:ours layer_norm:fwd:bfloat16:768:ours layer_norm:fwd:bfloat16:1024:ours \
    layer_norm:fwd:bfloat16:2048:ours copy > "$out/ncu.txt" 2>&1
  local keep="^  [a-zA-Z_v]|Duration|DRAM Throughput|Achieved Occupancy|Theoretical Occupancy|Registers Per"
  grep -E "$keep|Issued Warp|Warp Cycles Per Issued" "$out/ncu.txt" | head -90
}

ab_init "$@"
ab_run ab-v10
