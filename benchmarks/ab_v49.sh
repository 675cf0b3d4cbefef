#!/usr/bin/env bash
# The v49 device calls (RESULTS.md "v49"): bulk prefetches into L2 (cp.async.bulk.prefetch.L2; cuda_common.cuh
# prefetch_l2) of the rows a CTA or block will read next, so that HBM keeps reading through the phases in which the
# SM does not (the reductions, the output pass, the gap between one block and the next).
#   harness  both in-process harnesses built at once (softmax_long_ab.cu, norm_fwd_ab.cu with ptxas -v; NO_NORM=1:
#            the first only).
#   long     softmax_long_ab over LONG_CASES (default below), LONG_ROUNDS (default "1 2"). Calls 1-2 (branch
#            v49-ahead): the default against the next row's first 25..100% prefetched beside the row's bulk copy or
#            once the row has landed ("late"); call 3 on: the default (v49) against v27 and the bulk-copy cluster
#            alone at 0 / 60 / 75 / 90%.
#   ahead    norm_fwd_ab.cu mode ahead (branch v49-ahead), IN_ROUNDS (default "1 2"): v48's pair rows against the
#            same prefetching the rows of the block 1/2, 1 or 2 waves later.
#   lib      this tree into site-packages beside the softmax harness's build.
#   ctests   the bulk-copy cluster's GPU tests (slow ones included): the prefetch's plans, v27, the cluster plans,
#            merges, ties and the L2 rule, 8 workers.
#   verify   ab_softmax_fwd_verify: the forward's GPU tests beside compute-sanitizer over the softmax kernels,
#            then the > 2^31-element forward.
#   sbench   the bench's softmax forward, f32 and bf16, device timing.
#   sanfwd   compute-sanitizer memcheck and racecheck over the softmax forward kernels, the forward workload alone.
#   full     the whole bench, device timing (README's table, plots and ladder), into $out/full.
set -uo pipefail
source "$(dirname "$0")/ab_lib.sh"

stage_harness() {
  ab_nvcc_harness softmax_long_ab.cu /tmp/softmax_long_ab cpp/softmax_ladder.cu &
  [ -n "${NO_NORM:-}" ] || ab_nvcc_harness norm_fwd_ab.cu /tmp/norm_fwd_ab -Xptxas -v &
  wait
  ls -la /tmp/softmax_long_ab /tmp/norm_fwd_ab
}

stage_lib() {
  NO_NORM=1 stage_harness &
  ab_build || { wait; return 1; }
  wait
}

stage_ctests() {
  ab_gpu_tests ctests 300 "fwd_l2_ahead or (fwd_versions and v27) or fwd_cluster_plans or fwd_push_reduce or \
fwd_tie_rule or fwd_l2_rule" 280
  grep -E "passed|failed|FAILED|ERROR" "$out/ctests.log" | tail -5
}

stage_verify() { ab_softmax_fwd_verify verify v27 kns=softmax_fwd; }

# compute-sanitizer memcheck and racecheck over the softmax forward kernels, the forward alone (racecheck's own crash at
# the first backward on a cluster, sanitize.py's note, stopped verify's racecheck before the long rows).
stage_sanfwd() { SAN_ARGS=--fwd ab_sanitize sanfwd kns=softmax_fwd 220 softmax; }

stage_full() { ab_full 400 "^softmax +fwd "; }

stage_sbench() { ab_dbench sbench-fwd device --ops softmax --dirs fwd --parts sweep; }

stage_long() {
  for round in ${LONG_ROUNDS:-1 2}; do
    # shellcheck disable=SC2086
    timeout 200 /tmp/softmax_long_ab ${LONG_CASES:-f32:50257 bf16:50257 f32:131072 bf16:131072 f32:65536 \
      bf16:65536 bf16:100000} > "$out/softmax_long_ab_r$round.md" 2>&1
    echo "rc=$?"
    grep -h "^|\|^\*\*" "$out/softmax_long_ab_r$round.md" | grep -v "pipelined" | cut -c1-200
  done
}

stage_ahead() {
  local r
  for r in ${IN_ROUNDS:-1 2}; do
    timeout 200 /tmp/norm_fwd_ab ahead > "$out/ahead_r$r.md" 2>&1
    echo "rc=$? (round $r)"
    grep -h "^|\|^\*\*" "$out/ahead_r$r.md" | cut -c1-300
  done
}

ab_init "$@"
ab_run v49
