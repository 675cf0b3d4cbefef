#!/usr/bin/env bash
# The v51 device calls (RESULTS.md "v51"): v50 (v49's prefetch of each bulk-copy CTA's next share into L2, at L2's
# evict_last priority) as the softmax forward's default, checked and measured.
#   lib      this tree into site-packages, beside softmax_long_ab.cu built for sm_90.
#   harness  softmax_long_ab.cu alone, built for sm_90.
#   long     softmax_long_ab over LONG_CASES (default below), LONG_ROUNDS (default "1 2"), each round its own process,
#            AB_VARIANTS (default "v27,v49"): the default (v50) against v49 and v27 alone, and the copies.
#   verify   the softmax forward's GPU tests (every size class and dtype, special values, poisoned outputs, many rows,
#            the bulk-copy plans' prefetch at the rule's and forced cluster sizes, v49's and v27's version tests;
#            8 workers) beside compute-sanitizer memcheck and racecheck over every softmax forward kernel
#            (sanitize.py --fwd: SOFTMAX_AHEAD_SHAPES run the prefetch).
#   race     racecheck alone over the same kernels, resumed past the tool's own crashes (ab_sanitize_resume; call 1's
#            racecheck beside memcheck ended in the tool's segmentation fault).
#   big      the > 2^31-element softmax forward (auto), and the size classes whose forward takes the bulk-copy cluster
#            (bf16 131072, 262147, 524288: forward and backward).
#   full     the whole bench, device timing, into $out/full (README's table and plots).
# The calls as run: `lib long verify`; `LONG_ROUNDS=3 ... lib big race full long`; then on branch v51-depth's tree
# (its harness variants: prefetches 2-3 rows ahead, v14's kernel prefetching its next row) `harness long` twice, with
# AB_VARIANTS="rows ahead,next row,v14 two-pass,v49,75%, kept (evict_last)" (the fragment "75%" matched most variants
# and the rounds ran out of time at bf16 262144) over f32:50257 f32:131072 bf16:131072 ..., then AB_VARIANTS="next
# row,v14 two-pass" over bf16:50257 bf16:65536 bf16:40000.
set -uo pipefail
source "$(dirname "$0")/ab_lib.sh"

stage_harness() { ab_nvcc_harness softmax_long_ab.cu /tmp/softmax_long_ab cpp/softmax_ladder.cu; }

stage_lib() {
  ab_build_beside harness || return 1
  ls -la /tmp/softmax_long_ab
}

stage_long() {
  ab_long_rounds "${AB_VARIANTS:-v27,v49}" "${LONG_CASES:-f32:50257 f32:65536 f32:131072 bf16:131072 bf16:262144}" 110
}

stage_verify() {
  SAN_ARGS=--fwd ab_sanitize verify kns=softmax_fwd 270 softmax &
  ab_gpu_tests verify-tests 280 "(gpu and softmax and not slow and not big and not forward_axis and (test_forward or \
auto_size_classes_forward or auto_many_rows or special_values or nan_row or huge_logits or masked_neg_inf or \
stale_and_poisoned)) or fwd_l2_ahead or (fwd_versions and (v49 or v27))" 270
  wait
  grep -E "passed|failed|FAILED|ERROR" "$out/verify-tests.log" | tail -5
}

stage_race() { ab_sanitize_resume racecheck race kns=softmax_fwd 200 --fwd --only softmax; }

stage_big() {
  ab_big_tests "(big_softmax_forward and auto) or (big_softmax_size_class and (131072 or 262147 or 524288))"
}

stage_full() { ab_full 300 "^softmax +fwd "; }

ab_init "$@"
ab_run v51
