#!/usr/bin/env bash
# The v18 measurements on main (branch v18 holds the 1024-thread register variant's driver):
#   ceiling  benchmarks/row_ceiling.cu, the long rows' structure without the softmax's arithmetic (standalone).
#   kb       f32 rows of 16384 < C <= 32768 on the one-buffer bulk-copy cluster (JAX_MEMOPS_SOFTMAX_FWD=v5) at
#            forced k (KS, default 2 4 8) against the default (v9's 8-pack block rows), ROUNDS rounds.
#   pipe     the norms' fused backward with cp.async prefetch three rows ahead (JAX_MEMOPS_NORM_BWD=v18-pipe,
#            16-bit rows): its GPU test, then bwd and fwd+bwd of LayerNorm / RMSNorm against the default,
#            bf16 / f16 over issue 5's widths (PIPE_COLS), ROUNDS rounds (default two).
#   pipesan  compute-sanitizer memcheck and racecheck over sanitize.py's norm workload under v18-pipe
#            (fused backward kernels only).
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

stage_pipe() {
  ab_gpu_tests pytest-pipe 300 "${TESTS:-norm_backward_prefetch or backward_partials}" 280
  grep -E "^(FAILED|ERROR)" "$out/pytest-pipe.log" | cut -c1-300
  # shellcheck disable=SC2086
  ab_rounds "pipe-r" --var JAX_MEMOPS_NORM_BWD --versions "" v18-pipe --ops layer_norm rms_norm \
    --dirs bwd fwd+bwd --dtypes ${PIPE_DTYPES:-bfloat16} --cols ${PIPE_COLS:-768 1024 2048 4096 8192 12288}
}

stage_pipesan() {
  local tool
  for tool in memcheck racecheck; do
    JAX_MEMOPS_NORM_BWD=v18-pipe XLA_PYTHON_CLIENT_PREALLOCATE=false XLA_FLAGS=--xla_gpu_enable_command_buffer= \
      timeout 200 compute-sanitizer --tool $tool --kernel-name kns=norm_bwd_fused --error-exitcode 3 \
      python3 benchmarks/sanitize.py --only layer_norm rms_norm > "$out/$tool-pipe.log" 2>&1 &
  done
  wait
  for tool in memcheck racecheck; do
    echo "$tool: $(grep -E 'SUMMARY|checks passed' "$out/$tool-pipe.log" | tail -2 | tr '\n' ' ')"
  done
}

ab_init "$@"
ab_run ab-v18
