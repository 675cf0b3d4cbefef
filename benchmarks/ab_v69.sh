#!/usr/bin/env bash
# The v69 device calls (RESULTS.md "v69"): whether the long rows' persistent grid of bulk-copy clusters (softmax
# forward, issue 4) loses time to clusters that finish their fixed share of rows at different times.
#   lib      this tree into site-packages, beside softmax_long_ab.cu built for sm_90 with its trace (JM_TRACE_EXITS) and
#            its ticket variant (since v73 the library's).
#   harness  softmax_long_ab.cu alone, built so.
#   long     softmax_long_ab over LONG_CASES (default f32:50257 f32:131072 bf16:131072 bf16:50257), LONG_ROUNDS
#            (default "1 2"), each round its own process, AB_VARIANTS (default: the bulk-copy plan on grids of 1-8 rows
#            per cluster and with rows by tickets, that plan on its persistent grid, v14's two-pass kernel on its
#            persistent grid and on a full one), and AB_TRACE=1: each traced variant (bulk copy, two-pass) launched once
#            more, every CTA's start, exit and SM recorded (the SMs' last exits, the SM time left idle after them).
#   grid     the bench (device timing), softmax forward and backward at C = 32768, 50257 and 131072, f32 and bf16, under
#            JAX_MEMOPS_GRID unset and =full (since v69 the cluster kernels and the L2 two-pass rows take it: one
#            cluster or CTA per row), each its own process, ROUNDS (default "1 2").
#   v72      the bench's forward under JAX_MEMOPS_SOFTMAX_FWD=v72 and unset (ROUNDS), then test_gpu_fwd_versions[v72].
#   tests    what of the GPU suite never ran on a GPU: test_gpu_grid (the cluster kernels and the L2 two-pass rows on
#            full grids) and test_grad_sums' GPU cases, in the time left of a
#            T_END (default 560) s call (at least 60 s).
# The call planned (RESULTS.md "v69"): `lib long grid tests` (~60 s to build, ~80 s a round of long, ~50 s a process of
# grid).
set -uo pipefail
source "$(dirname "$0")/ab_lib.sh"

stage_harness() {
  ab_nvcc_harness softmax_long_ab.cu /tmp/softmax_long_ab cpp/softmax_ladder.cu -DJM_TRACE_EXITS
}

stage_lib() {
  ab_build_beside harness || return 1
  ls -la /tmp/softmax_long_ab
}

stage_long() {
  AB_TRACE=1 ab_long_rounds "${AB_VARIANTS:-grid,tickets,kept (evict,v14}" \
    "${LONG_CASES:-f32:50257 f32:131072 bf16:131072 bf16:50257}" 150
}

stage_grid() {
  AB_TIMEOUT=200 ab_rounds grid --var JAX_MEMOPS_GRID --versions "" full --dirs fwd bwd --dtypes float32 bfloat16 \
    --cols 32768 50257 131072 --timing device
}

# v72 (A/B version: v50 with v14's L2 rows on a full grid and bulk-copy rows under 256 KB on grids of 2 rows per
# cluster) against the default in the bench, the forward, and its version test.
stage_v72() {
  AB_TIMEOUT=200 ab_rounds v72- --var JAX_MEMOPS_SOFTMAX_FWD --versions "" v72 --dirs fwd --dtypes float32 bfloat16 \
    --cols 32768 50257 100000 131072 --timing device
  ab_gpu_tests v72-tests 300 "fwd_versions and v72" 290
}

stage_tests() {
  local left=$((${T_END:-560} - SECONDS))
  ab_gpu_tests tests $((left > 60 ? left : 60)) "gpu_grid or (gpu and test_param_grads)" 200
}

ab_init "$@"
ab_run v69
