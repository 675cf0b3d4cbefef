#!/usr/bin/env bash
# The v22 measurements (RESULTS.md "v22"). Three experiments on the norms' forward ran on branches, each with
# its own copy of this driver (stages build, fwdtest, ab: the versions' GPU test and the default against them):
# v22-lean (norm_fwd_lean.cuh, persistent teams; JAX_MEMOPS_NORM_FWD=v22 / v22-0 / v22-hold), v22-pair
# (norm_fwd_pair.cuh, two rows per thread; =v22-pair) and v22-one (its lean rows at one row per thread; =v22-one,
# with a stage onecheck). None was adopted. What main keeps, and this driver
# measures: the lean backward's scale loads by load_param_cols (review of v21) against build/old (the tree
# before it, carried to the device), and the norms' version tests with every forward call poisoned.
#   build    this tree (sm_90) and build/old (into /tmp/oldsite), side by side.
#   verify   the forward and backward versions' GPU tests (fresh processes) beside compute-sanitizer memcheck
#            and racecheck over sanitize.py's norms; then the > 2^31-element LayerNorm backward; a line each.
#   bwd      backward, this build against build/old's, f32 and bf16, C = 1024 .. 12288 (one round).
#   memcheck compute-sanitizer memcheck over sanitize.py's norms alone (after the verify stage's run, beside
#            the tests, ended in the tool's own SIGSEGV); where the tool crashes, resumed (ab_sanitize_resume).
#   ncu      Nsight Compute over the 16-bit forward register rows (norm_fwd_rows_kernel / _half_kernel), bf16
#            LayerNorm against RMSNorm at C = 1024 (team rows) and 12288 (block rows): where their warps wait.
set -uo pipefail
source "$(dirname "$0")/ab_lib.sh"

stage_build() {
  ab_build_old &
  ab_build || exit 1
  wait $! || echo "build/old failed: $(tail -3 "$out/build-old.log")"
}

stage_verify() {
  XLA_PYTHON_CLIENT_PREALLOCATE=false timeout 330 python3 -P -m pytest -q -rfE -n 8 --timeout 320 \
    -k "norm_backward_versions or norm_forward_versions" tests/test_gpu.py > "$out/versions.log" 2>&1 &
  ab_norm_sanitize v22 kns=norm_ 330
  tail -n 1 "$out/versions.log"
  XLA_PYTHON_CLIENT_PREALLOCATE=false timeout 170 python3 -P -m pytest -q -rfEs --timeout 160 \
    -k "big_layer_norm_backward" tests/test_gpu.py > "$out/big.log" 2>&1
  tail -n 1 "$out/big.log"
}

stage_bwd() {
  ab_against_old nbwd-swap --ops layer_norm rms_norm --dirs bwd --dtypes float32 bfloat16 \
    --cols 1024 2048 4096 8192 12288
}

stage_memcheck() { ab_sanitize_resume memcheck alone kns=norm_ 200 --only layer_norm rms_norm; }

stage_ncu() {
  ab_ncu_cases ncu-fwd "regex:norm_fwd_(rows|half)" layer_norm:fwd:bfloat16:1024:ours rms_norm:fwd:bfloat16:1024:ours \
    layer_norm:fwd:bfloat16:12288:ours rms_norm:fwd:bfloat16:12288:ours
}

ab_init "$@"
ab_run ab-v22
