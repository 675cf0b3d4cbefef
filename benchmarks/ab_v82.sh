#!/usr/bin/env bash
# The v82 device calls (RESULTS.md "v82"): v79 (the default) with its bulk-copy clusters launched by programmatic
# dependent launch, so that a launch's CTAs take the SMs as the stream's previous kernel leaves them and set up before
# it has finished (softmax_fwd_tma.cuh grid_dependency_wait). Stages:
#   lib      this tree into site-packages, beside softmax_long_ab.cu built for sm_90.
#   burst    softmax_long_ab over LONG_CASES, the default against v82 (and v77), AB_BURST (default 8) launches back to
#            back per sample after an AB_SPIN_US (default 300) µs spin: the stream's throughput, gaps included.
#   single   the same, one launch per sample after a 50 µs spin (v82 should not lose where nothing precedes it).
#   bench    the bench's forward (device timing: CUPTI's kernel spans, gaps excluded) under the default and v82, f32
#            and bf16, C = BENCH_COLS.
#   pdl      the bench (device timing) with plain launches and under JAX_MEMOPS_PDL=1 (every kernel by programmatic
#            dependent launch), f32 and bf16: softmax forward and backward at PDL_SOFTMAX_COLS, LayerNorm and RMSNorm
#            forward and forward + backward at PDL_NORM_COLS.
#   launch   launch_cost.cu (ab_sizes.sh's stage).
#   check    the GPU tests of v82 (its chains of dependent launches, every version shape, its tickets over 1100
#            launches; a training step's outputs under JAX_MEMOPS_PDL=1 bitwise those of plain launches) beside
#            compute-sanitizer racecheck and memcheck over cluster_race.py under JAX_MEMOPS_PDL=1.
#   issues   ab_v75.sh's stage (the issues' table) under JAX_MEMOPS_SOFTMAX_FWD=$ISSUES_FWD (default: the default).
set -uo pipefail
here=$(dirname "$0")
source "$here/ab_lib.sh"
cases=${LONG_CASES:-f32:50257 f32:131072 bf16:100000 bf16:131072 bf16:262144}

stage_harness() { ab_nvcc_harness softmax_long_ab.cu /tmp/softmax_long_ab cpp/softmax_ladder.cu; }
stage_lib() { ab_build_beside harness || return 1; }

stage_burst() {
  AB_BURST=${AB_BURST:-8} AB_SPIN_US=${AB_SPIN_US:-300} LONG_ROUNDS=${LONG_ROUNDS:-1} \
    ab_long_rounds "${AB_VARIANTS:-v82,v77}" "$cases" 200
  for f in "$out"/softmax_long_ab_r*.md; do mv "$f" "${f%.md}-burst.md"; done
}

stage_single() {
  AB_BURST=1 AB_SPIN_US=50 LONG_ROUNDS=${LONG_ROUNDS:-1} ab_long_rounds "${AB_VARIANTS:-v82,v77}" "$cases" 150
}

stage_bench() {
  # shellcheck disable=SC2086
  ROUNDS=${ROUNDS:-1} AB_TIMEOUT=240 ab_rounds v82- --var JAX_MEMOPS_SOFTMAX_FWD --versions "" v82 \
    --dirs fwd --dtypes float32 bfloat16 --cols ${BENCH_COLS:-32768 50257 100000 131072 262144} --timing device
}

stage_pdl() {
  # shellcheck disable=SC2086
  ROUNDS=${ROUNDS:-1} AB_TIMEOUT=280 ab_rounds pdl-sm- --var JAX_MEMOPS_PDL --versions "" 1 --ops softmax \
    --dirs fwd bwd --dtypes float32 bfloat16 --cols ${PDL_SOFTMAX_COLS:-1024 8192 50257 131072} --timing device
  # shellcheck disable=SC2086
  ROUNDS=${ROUNDS:-1} AB_TIMEOUT=280 ab_rounds pdl-norm- --var JAX_MEMOPS_PDL --versions "" 1 --ops layer_norm \
    rms_norm --dirs fwd fwd+bwd --dtypes float32 bfloat16 --cols ${PDL_NORM_COLS:-1024 12288} --timing device
}

stage_launch() {
  ab_nvcc_harness launch_cost.cu /tmp/launch_cost cpp/softmax_ladder.cu || return 1
  timeout 60 /tmp/launch_cost > "$out/launch_cost.md" 2>&1
  echo "rc=$?"
  cat "$out/launch_cost.md"
}

stage_check() {
  local left=$((${T_END:-330} - SECONDS))
  left=$((left > 90 ? left : 90))
  ab_gpu_tests tests "$left" \
    "${TESTS_K:-gpu and (pdl_bitwise or pdl_chain or fwd_versions and v82 or fwd_tickets and v82)}" "$((left - 10))" &
  ab_cluster_race_beside "$((left - 5))" JAX_MEMOPS_PDL=1
}

stage_issues() {
  JAX_MEMOPS_SOFTMAX_FWD=${ISSUES_FWD:-} bash "$here/ab_v75.sh" issues
}

ab_init "$@"
ab_run v82
