#!/usr/bin/env bash
# The v20 measurements: the lean norm backward for f32 rows of K = 4 packs (cpp/norms.cu lean_team), the
# two-rows-ahead lean variant for RMSNorm, and where the short softmax rows lose to XLA.
#   build    this tree (sm_90).
#   verify   the backward versions' GPU test (6 fresh processes; bf16, f16, f32) beside compute-sanitizer
#            memcheck and racecheck over sanitize.py's norms, then the > 2^31-element LayerNorm backward.
#   f32      bwd and fwd+bwd, f32, LayerNorm and RMSNorm, the default against v18 (F32_ROUNDS rounds, default
#            one; F32_COLS).
#   deep     bwd and fwd+bwd, bf16, RMSNorm, the default against DEEP_VS (default v19: one row ahead; before
#            v20's default took two rows ahead, this stage ran against v19-deep) (ROUNDS rounds).
#   final    the softmax forward's cached I/O (the v20 default): its GPU tests (the forward's classes, special
#            values, poisoned outputs; JAX_MEMOPS_SOFTMAX_FWD=v14's version test) beside compute-sanitizer
#            memcheck and racecheck over sanitize.py's softmax (kernel softmax_fwd_regs), the > 2^31-element
#            forward, then the default against v14 at C = 128..2048 (one round).
#   sweep    the bench's sweep where v20 changed the defaults: softmax fwd (f32, bf16, C = 128..8192) and the
#            norms' bwd and fwd+bwd (f32, bf16), one process each; result lines shown.
#   ncu128   Nsight Compute over the softmax forward at C = 128 (f32, bf16) and bf16 512, ours and XLA's
#            kernels and the bench's copy: duration, DRAM throughput and bytes, occupancy, launch shape.
set -uo pipefail
source "$(dirname "$0")/ab_lib.sh"

stage_build() { ab_build || exit 1; }

stage_verify() { ab_norm_bwd_verify v20; }

stage_f32() {
  # shellcheck disable=SC2086
  ROUNDS=${F32_ROUNDS:-1} AB_TIMEOUT=${AB_TIMEOUT:-200} ab_rounds nbwd-f32-r --var JAX_MEMOPS_NORM_BWD \
    --versions "" v18 --ops layer_norm rms_norm --dirs bwd fwd+bwd --dtypes float32 \
    --cols ${F32_COLS:-768 1024 8192 12288}
}

stage_deep() {
  # shellcheck disable=SC2086
  AB_TIMEOUT=${AB_TIMEOUT:-200} ab_rounds nbwd-deep-r --var JAX_MEMOPS_NORM_BWD --versions "" "${DEEP_VS:-v19}" \
    --ops rms_norm --dirs bwd fwd+bwd --dtypes bfloat16 --cols ${AB_COLS:-768 1024 2048 4096 8192 12288}
}

stage_final() {
  ab_softmax_fwd_verify softmax v14 kns=softmax_fwd_regs
  ROUNDS=1 AB_TIMEOUT=100 ab_rounds final-ab-r --var JAX_MEMOPS_SOFTMAX_FWD --versions "" v14 --ops softmax \
    --dirs fwd --dtypes float32 bfloat16 --cols 128 512 1024 2048
}

stage_sweep() {
  timeout 150 python3 -P -m jax_memops.cli bench --ops softmax --dirs fwd --parts sweep --dtypes float32 bfloat16 \
    --cols 128 512 1024 2048 4096 8192 --out "$out/sweep-softmax" > "$out/sweep-softmax.log" 2>&1
  grep -E "^softmax" "$out/sweep-softmax.log"
  timeout 220 python3 -P -m jax_memops.cli bench --ops layer_norm rms_norm --dirs bwd fwd+bwd --parts sweep \
    --dtypes float32 bfloat16 --out "$out/sweep-norms" > "$out/sweep-norms.log" 2>&1
  grep -E "^(layer|rms)_norm" "$out/sweep-norms.log"
}

stage_ncu128() {
  XLA_PYTHON_CLIENT_PREALLOCATE=false XLA_PYTHON_CLIENT_ALLOCATOR=platform timeout 200 \
    ncu --profile-from-start off --clock-control none --section SpeedOfLight --section MemoryWorkloadAnalysis \
    --section Occupancy --section LaunchStats --section WarpStateStats \
    --metrics dram__bytes_read.sum,dram__bytes_write.sum \
    -f -o "$out/ncu128" python3 benchmarks/ncu_profile.py softmax:fwd:float32:128 softmax:fwd:bfloat16:128 \
    softmax:fwd:bfloat16:512 copy > "$out/ncu128.log" 2>&1
  tail -1 "$out/ncu128.log"
  ncu -i "$out/ncu128.ncu-rep" --page details > "$out/ncu128.txt" 2>&1
  grep -E "^  [a-zA-Z_].*\(|^    Duration|DRAM Throughput|dram__bytes|L2 Hit Rate|Block Size|Grid Size|\
Registers Per|Achieved Occupancy|Theoretical Occupancy|Waves Per SM|Warp Cycles Per Issued|Issue Slots Busy" \
    "$out/ncu128.txt" | cut -c1-110
}

ab_init "$@"
ab_run ab-v20
