#!/usr/bin/env bash
# The v73 and v74 device calls (RESULTS.md "v73 and v74"): the softmax forward's default since v74 (v50 with v14's L2
# rows on a full grid) and v73 (v74 with the bulk-copy clusters' rows by tickets) against v50 and v72, and their checks.
# Since v75 (ab_v75.sh) the default is v74 with the f32 rows by tickets: the harness's "default" is v75, and
# `JAX_MEMOPS_SOFTMAX_FWD=v75` in the bench of the twenty-third session's call (62e4b75) named a first v75 since gone
# (tickets in every one-buffer kernel); BENCH_VERSIONS now defaults to v74 v73.
#   lib      this tree into site-packages, beside softmax_long_ab.cu built for sm_90 with its trace (JM_TRACE_EXITS).
#   harness  softmax_long_ab.cu alone, built so.
#   long     softmax_long_ab over LONG_CASES (default f32:50257 f32:131072 bf16:100000 bf16:131072 bf16:50257),
#            LONG_ROUNDS (default 1), the default against v50, v72, v73 and the ticket plan alone, traced
#            (AB_TRACE=1).
#   bench    the bench's forward (device timing) under the default and JAX_MEMOPS_SOFTMAX_FWD = BENCH_VERSIONS (default
#            v74 v73), ROUNDS (default 1), C = BENCH_COLS (default 32768 .. 262144), f32 and bf16.
#   check    beside each other: the GPU tests of the tickets and of the versions and grids they touch (TESTS_K), and
#            compute-sanitizer racecheck (the merge rule; messages at every k) and memcheck over cluster_race.py's
#            bulk-copy and two-pass shapes under SAN_FWD (default v73), in the time left of a T_END (default 560) s
#            call.
# The call planned: `lib long bench check` (~70 s to build, ~45 s a round of long, ~55 s a process of bench).
set -uo pipefail
source "$(dirname "$0")/ab_lib.sh"

stage_harness() { ab_nvcc_harness softmax_long_ab.cu /tmp/softmax_long_ab cpp/softmax_ladder.cu -DJM_TRACE_EXITS; }

stage_lib() {
  ab_build_beside harness || return 1
  ls -la /tmp/softmax_long_ab
}

stage_long() {
  AB_TRACE=1 LONG_ROUNDS=${LONG_ROUNDS:-1} ab_long_rounds "${AB_VARIANTS:-v50,v72,v73,tickets}" \
    "${LONG_CASES:-f32:50257 f32:131072 bf16:100000 bf16:131072 bf16:50257}" 150
}

stage_bench() {
  ROUNDS=${ROUNDS:-1} AB_TIMEOUT=200 ab_rounds v73- --var JAX_MEMOPS_SOFTMAX_FWD \
    --versions "" ${BENCH_VERSIONS:-v74 v73} --dirs fwd --dtypes float32 bfloat16 \
    --cols ${BENCH_COLS:-32768 50257 65536 100000 131072 262144} --timing device
}

stage_check() {
  local left=$((${T_END:-560} - SECONDS))
  left=$((left > 90 ? left : 90))
  ab_gpu_tests tests "$left" "${TESTS_K:-fwd_tickets or fwd_versions[v50] or fwd_versions[v73] or fwd_versions[v74] \
or gpu_grid or fwd_l2_ahead or fwd_l2_rule}" "$((left - 10))" &
  ab_cluster_race_beside "$((left - 5))" JAX_MEMOPS_SOFTMAX_FWD=${SAN_FWD:-v73}
}

ab_init "$@"
ab_run v73
