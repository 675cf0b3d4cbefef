#!/usr/bin/env bash
# The v10 experiments (one device call runs some stages; A/B by environment variable, one build):
#   bash benchmarks/ab_v10.sh build pipe
# What is asked (benchmarks/RESULTS.md, "v10"):
#   pipe   JAX_MEMOPS_NORM_FWD=v10-pipe (norm_fwd_pipe.cuh: aligned team rows staged through shared
#          memory, a tile of 256 / tpr rows per bulk copy, up to 6 stages per block, 2 blocks per SM)
#          against the default (16-bit team rows of 6 packs where they fit, v9-6) and v3 (8 packs: the
#          16-bit rule before v10). Predicted: bf16 / f16 LayerNorm 768-2048 from 84-89% of the copy to
#          >= 92% (the copy engine keeps 2-5 tiles per block in flight through the reductions and stores,
#          against 72-96 KB of register loads per SM during load phases only); f32 team rows (C <= 1024)
#          unchanged or better. Then its GPU tests and compute-sanitizer over the norms under it.
#   test   the norm version tests (fresh processes: v3, v4, default, v10-pipe) and the GPU norm suite.
#   check  compute-sanitizer (gpu_check.sh sanitize) and the > 2^31-element tests.
set -uo pipefail
source "$(dirname "$0")/ab_lib.sh"

stage_build() { ab_build || exit 1; }

stage_pipe() {
  timeout 200 python3 benchmarks/softmax_ab.py --var JAX_MEMOPS_NORM_FWD --ops layer_norm rms_norm \
    --versions v3 "" v10-pipe --dtypes bfloat16 float16 --cols 128 768 1024 1536 2048 --out "$out/pipe16" \
    > "$out/pipe16.log" 2>&1
  grep -h "^|" "$out/pipe16.log"
  timeout 100 python3 benchmarks/softmax_ab.py --var JAX_MEMOPS_NORM_FWD --ops layer_norm rms_norm \
    --versions "" v10-pipe --dtypes float32 --cols 128 512 768 1024 --out "$out/pipe32" > "$out/pipe32.log" 2>&1
  grep -h "^|" "$out/pipe32.log"
}

stage_sanitize() {
  local tool
  for tool in memcheck racecheck; do
    XLA_PYTHON_CLIENT_PREALLOCATE=false XLA_FLAGS=--xla_gpu_enable_command_buffer= JAX_MEMOPS_NORM_FWD=v10-pipe \
      timeout 120 compute-sanitizer --tool $tool --kernel-name kns=norm --error-exitcode 3 \
      python3 benchmarks/sanitize.py --only layer_norm rms_norm > "$out/$tool-pipe.log" 2>&1
    echo "$tool (v10-pipe) rc=$? $(grep -E 'SUMMARY|passed' "$out/$tool-pipe.log" | tail -2 | tr '\n' ' ')"
  done
}

stage_test() {
  ab_gpu_tests pytest-norm-versions 200 "norm_forward_versions" 190
  ab_gpu_tests pytest-norm 250 "gpu and not slow and norm"
}

stage_check() { ab_check; }

ab_init "$@"
ab_run ab-v10
