#!/usr/bin/env bash
# The v8 experiments: this build against an older one (the same process per build, so both are measured
# in one lease), the stream kernels' GPU tests, and two re-measurements the v7 session left.
# Before the call, on the CPU machine: `rm -rf build/old && mkdir -p build/old && git archive main |
# tar -x -C build/old` (the commit to compare against), then on the device, carrying build/old:
#   bash benchmarks/ab_v8.sh build test        # ~60 + ~250 s
#   bash benchmarks/ab_v8.sh ab                # ~250 s (the warm machine keeps both builds)
# What is asked (benchmarks/RESULTS.md, "v7"):
#   stream  softmax_stream.cuh's walk_batches (branch v8): the stream classes (f32 fwd C = 600001, bwd
#           262147; 16-bit beyond the cluster's capacity), this build against build/old. Predicted: equal
#           within the noise (SASS: register moves, a few instructions).
#   norms16 JAX_MEMOPS_NORM_FWD=v3|v4 at bf16/f16 now that both have the parameter plans of v7.
#   fusion  issue 6's fusion experiment (fused vs three kernels vs XLA, 2^25 and 2^28) under v7's full
#           elementwise grid.
# Stage `verify` (after `build`): the GPU suite on the final code, and the norm forward against build/old
# (row_param_access; v3's rstd by rsqrtf: predicted equal within the noise, ~1% fewer instructions).
# Stage `check`: compute-sanitizer (gpu_check.sh sanitize) and the > 2^31-element tests.
# Stage `grad` (after `build`, build/old = f358944): gelu_grad branch-free with fewer operations
# (gelu_math.h) against build/old: the GELU backward (with dscale/dbias: the partials kernel) and the
# jitted fwd+bwd, f32/bf16 at C = 768 / 4096, and the GPU GELU tests. Predicted: bf16 backward +5-15%
# (~30 -> ~23 instructions per element; the kernel runs one 512-thread block per SM, so a shorter compute
# phase leaves loads in flight longer), f32 within the noise (at ~90% of the copy).
# Stage `gelu` (after `build`, build/old = the commit before the GELU parameter modes): the GELU
# kernels' ParamMode (cuda_common.cuh) against build/old — the sweep's per-column case (kRows) forward
# and backward, the fusion experiment (kScalars) per build and per elementwise grid — and the GPU GELU
# tests. Predicted: bf16 fused 84-88% -> >= 93% of the copy (13 instead of ~33 instructions per
# element), f32 unchanged (at the copy already), per-column bf16 +5-10%.
set -uo pipefail
source "$(dirname "$0")/ab_lib.sh"

stage_build() {
  ab_build_old &
  ab_build || exit 1
  wait
}

stage_test() { ab_gpu_tests pytest 280 "gpu and not slow"; }

stage_ab() {
  ab_against_old stream --dirs fwd bwd --cols 262147 600001
  timeout 80 python3 benchmarks/norms_ab.py --dtypes bfloat16 float16 --out "$out/norms16" > "$out/norms16.log" 2>&1
  grep -h "^|" "$out/norms16.log"
  timeout 100 python3 -P -m jax_memops.cli bench --fusion --out "$out/fusion" > "$out/fusion.log" 2>&1
  grep -A30 -i "fusion" "$out/fusion.log" | head -40
}

stage_gelu() {
  ab_gpu_tests pytest-gelu 150 "gpu and not slow and (gelu or unfused or chain)"
  ab_against_old gelu --ops gelu --dirs fwd bwd --dtypes float32 bfloat16 --cols 768 4096
  local run name path grid
  for run in old:/tmp/oldsite:full new::full new::persistent; do
    IFS=: read -r name path grid <<< "$run"
    echo "-- fusion $name grid=$grid"
    PYTHONPATH=$path JAX_MEMOPS_GRID=$grid timeout 60 python3 -P -m jax_memops.cli bench --fusion \
      --out "$out/fusion-$name-$grid" 2>&1 | grep -A6 "fused kernel vs"
  done
}

stage_grad() {
  ab_gpu_tests pytest-grad 150 "gpu and not slow and (gelu or unfused or chain)"
  ab_against_old grad --ops gelu --dirs bwd fwd+bwd --dtypes float32 bfloat16 --cols 768 4096
}

stage_verify() {
  ab_gpu_tests pytest-verify 290 "gpu and not slow"
  ab_against_old norms --ops layer_norm rms_norm --dtypes bfloat16 float32
}

stage_check() { ab_check; }

ab_init "$@"
ab_run ab-v8
