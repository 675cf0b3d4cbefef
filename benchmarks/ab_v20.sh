#!/usr/bin/env bash
# The v20 measurements: the lean norm backward for f32 rows of K = 4 packs (cpp/norms.cu lean_team), the
# two-rows-ahead lean variant for RMSNorm, and where the short softmax rows lose to XLA.
#   build    this tree (sm_90).
#   verify   the backward versions' GPU test (5 fresh processes; bf16, f16, f32) beside compute-sanitizer
#            memcheck and racecheck over sanitize.py's norms, then the > 2^31-element LayerNorm backward.
#   f32      bwd and fwd+bwd, f32, LayerNorm and RMSNorm, the default against v18 (F32_ROUNDS rounds, default
#            one; F32_COLS).
#   deep     bwd and fwd+bwd, bf16, RMSNorm, the default against v19-deep (ROUNDS rounds).
#   ncu128   Nsight Compute over the softmax forward at C = 128 (f32, bf16) and bf16 512, ours and XLA's
#            kernels and the bench's copy: duration, DRAM throughput and bytes, occupancy, launch shape.
set -uo pipefail
source "$(dirname "$0")/ab_lib.sh"

stage_build() { ab_build || exit 1; }

stage_verify() {
  XLA_PYTHON_CLIENT_PREALLOCATE=false timeout 300 python3 -P -m pytest -q -rfE -n 5 --timeout 280 \
    -k "norm_backward_versions" tests/test_gpu.py > "$out/versions.log" 2>&1 &
  ab_norm_sanitize v20 kns=_kernel 280
  tail -n 1 "$out/versions.log"
  XLA_PYTHON_CLIENT_PREALLOCATE=false timeout 170 python3 -P -m pytest -q -rfEs --timeout 160 \
    -k "big_layer_norm_backward" tests/test_gpu.py > "$out/big.log" 2>&1
  tail -n 1 "$out/big.log"
}

stage_f32() {
  # shellcheck disable=SC2086
  ROUNDS=${F32_ROUNDS:-1} AB_TIMEOUT=${AB_TIMEOUT:-200} ab_rounds nbwd-f32-r --var JAX_MEMOPS_NORM_BWD \
    --versions "" v18 --ops layer_norm rms_norm --dirs bwd fwd+bwd --dtypes float32 \
    --cols ${F32_COLS:-768 1024 8192 12288}
}

stage_deep() {
  # shellcheck disable=SC2086
  AB_TIMEOUT=${AB_TIMEOUT:-200} ab_rounds nbwd-deep-r --var JAX_MEMOPS_NORM_BWD --versions "" v19-deep \
    --ops rms_norm --dirs bwd fwd+bwd --dtypes bfloat16 --cols ${AB_COLS:-768 1024 2048 4096 8192 12288}
}

stage_ncu128() {
  XLA_PYTHON_CLIENT_PREALLOCATE=false XLA_PYTHON_CLIENT_ALLOCATOR=platform timeout 200 \
    ncu --profile-from-start off --clock-control none --section SpeedOfLight --section MemoryWorkloadAnalysis \
    --section Occupancy --section LaunchStats --section WarpStateStats --metrics dram__bytes_read.sum,dram__bytes_write.sum \
    -f -o "$out/ncu128" python3 benchmarks/ncu_profile.py softmax:fwd:float32:128 softmax:fwd:bfloat16:128 \
    softmax:fwd:bfloat16:512 copy > "$out/ncu128.log" 2>&1
  tail -1 "$out/ncu128.log"
  ncu -i "$out/ncu128.ncu-rep" --page details > "$out/ncu128.txt" 2>&1
  grep -E "^  [a-zA-Z_].*\(|^    Duration|DRAM Throughput|dram__bytes|L2 Hit Rate|Block Size|Grid Size|Registers Per|\
Achieved Occupancy|Theoretical Occupancy|Waves Per SM|Warp Cycles Per Issued|Issue Slots Busy" "$out/ncu128.txt" | cut -c1-110
}

ab_init "$@"
ab_run ab-v20
