#!/usr/bin/env bash
# The v18 measurements on main (branch v18 holds the 1024-thread register variant's driver):
#   ceiling  benchmarks/row_ceiling.cu, the long rows' structure without the softmax's arithmetic (standalone).
#   kb       f32 rows of 16384 < C <= 32768 on the one-buffer bulk-copy cluster (JAX_MEMOPS_SOFTMAX_FWD=v5) at
#            forced k (KS, default 2 4 8) against the default (v9's 8-pack block rows), ROUNDS rounds.
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

ab_init "$@"
ab_run ab-v18
