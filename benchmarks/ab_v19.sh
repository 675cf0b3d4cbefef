#!/usr/bin/env bash
# The v19 measurements: the norms' 16-bit fused backward with fewer instructions per element
# (cpp/norm_bwd_lean.cuh; JAX_MEMOPS_NORM_BWD: "" the default v19 — since v20 the default is v20 and
# `v19` gives v19's —, v19-hold, v19-lean, v19-deep, v18 the old kernel; AB_DTYPES=float32 for the f32 rows
# v20 added).
#   build    this tree (sm_90).
#   test     the norms' GPU tests (the backward versions' test included), 8 workers.
#   verify   the backward versions' GPU test (5 fresh processes) beside compute-sanitizer memcheck and racecheck
#            over sanitize.py's norms (lean kernel: K = 2 full, K = 3 full and not), then the > 2^31-element
#            LayerNorm backward (bf16 C = 4096: the lean kernel with prefetch).
#   ab       bwd and fwd+bwd, bf16, issue 5's C, default against VERSIONS (default "v18 v19-hold"), ROUNDS rounds.
#   ncu      Nsight Compute over the lean kernel (NCU_CASES, default LayerNorm / RMSNorm bf16 8192 and
#            LayerNorm bf16 768) and v18's (NCU_V18_CASES, LayerNorm bf16 768): DRAM throughput, issue slots,
#            warps per scheduler, executed instructions per element and where the warps wait.
set -uo pipefail
source "$(dirname "$0")/ab_lib.sh"

stage_build() { ab_build || exit 1; }

stage_test() {
  ab_gpu_tests norm-gpu "${T_TEST:-260}" "gpu and norm and not slow and not big" 240
  grep -E "FAILED|Error" "$out/norm-gpu.log" | head -5
}

stage_verify() { ab_norm_bwd_verify v19; }

stage_ab() {
  # shellcheck disable=SC2086
  AB_TIMEOUT=${AB_TIMEOUT:-280} ab_rounds nbwd-r --var JAX_MEMOPS_NORM_BWD --versions "" ${VERSIONS:-v18 v19-hold} \
    --ops layer_norm rms_norm --dirs bwd fwd+bwd --dtypes ${AB_DTYPES:-bfloat16} \
    --cols ${AB_COLS:-768 1024 2048 4096 8192 12288}
}

stage_ncu() {
  local kernels="regex:norm_bwd_(lean|fused)"
  # shellcheck disable=SC2086
  ab_ncu_cases ncu "$kernels" ${NCU_CASES:-layer_norm:bwd:bfloat16:8192:ours rms_norm:bwd:bfloat16:8192:ours \
    layer_norm:bwd:bfloat16:768:ours}
  # shellcheck disable=SC2086
  JAX_MEMOPS_NORM_BWD=v18 ab_ncu_cases ncu-v18 "$kernels" ${NCU_V18_CASES:-layer_norm:bwd:bfloat16:768:ours}
}

ab_init "$@"
ab_run ab-v19
