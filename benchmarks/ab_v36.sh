#!/usr/bin/env bash
# The v36 device calls: the softmax forward's long rows through a two-pass kernel whose passes are pipelined across
# rows, L2 as the row buffer (benchmarks/softmax_long_ab.cu, in one process against the handler's default).
#   long     softmax_long_ab over LONG_CASES (dtype:C ...; default the harness's), LONG_ROUNDS (default "1 2").
#   btest    the norm backward versions' GPU tests for BT_VERSIONS (default "default v36"), 4 workers (calls 4 and 5 ran
#            the tree whose default was v36: "default v35", "default").
#   final    btest for the default alone, then lnorms (call 5, on the tree whose default was v36's final rule).
#   ab       benchmarks/partials_ab.py once per kernel version, one process each (AB_VERSIONS, default "v35 v36 v35":
#            the last the processes' A/A; call 3 ran "v35 v36-k2 v36-k3 v35"), AB_OPS (default layer_norm rms_norm) in
#            AB_DIRS (default bwd) at AB_COLS (default: widths whose power-of-two teams leave slots empty, and 4096 /
#            12288, full) in AB_DTYPES (default bfloat16); each version's ms against the first one's (files tagged
#            AB_TAG, default stage).
#   sanr     compute-sanitizer memcheck and racecheck side by side over the norms' backward kernels under
#            JAX_MEMOPS_NORM_BWD=v36 (its odd teams), each resumed where the tool itself crashes.
#   big      the > 2^31-element LayerNorm and RMSNorm backward tests.
#   ptest    the norms' backward GPU tests (paired blocks, determinism, partials, gradients).
#   verify   btest then big, beside ptest and sanr (call 2 ran btest "default v34" beside ptest, after the host code's
#            one launch plan, bwd_launch in cpp/norms.cu).
#   lnorms   the bench's LayerNorm and RMSNorm forward and backward in bf16 at the hidden sizes of common language
#            models (896 ... 8192; device timing), for widths whose rows leave a kernel's slots empty.
#   lsoftmax the bench's softmax forward and backward at vocabulary sizes (32000 ... 256000; f32, bf16).
set -uo pipefail
source "$(dirname "$0")/ab_lib.sh"

stage_long() {
  ab_nvcc_harness softmax_long_ab.cu /tmp/softmax_long_ab cpp/softmax_ladder.cu || return 1
  for round in ${LONG_ROUNDS:-1 2}; do
    # shellcheck disable=SC2086
    timeout 200 /tmp/softmax_long_ab ${LONG_CASES:-} > "$out/softmax_long_ab_r$round.md" 2>&1
    echo "rc=$?"
    cat "$out/softmax_long_ab_r$round.md"
  done
}

stage_btest() { ab_norm_btest "default v36" 4; }

stage_ab() {
  # shellcheck disable=SC2086
  ab_norm_versions "${AB_TAG:-stage}" "v35 v36 v35" --ops ${AB_OPS:-layer_norm rms_norm} --dirs ${AB_DIRS:-bwd} \
    --cols ${AB_COLS:-2056 2304 2560 3584 4104 4608 5000 5120 6152 7168 8200 9216 10000 4096 12288} \
    --dtypes ${AB_DTYPES:-bfloat16}
}

stage_sanr() { JAX_MEMOPS_NORM_BWD=v36 ab_norm_sanr v36; }

stage_big() { ab_norm_big; }

stage_ptest() { ab_norm_ptest; }

stage_verify() { ab_norm_verify; }

stage_final() {
  BT_VERSIONS=default stage_btest
  stage_lnorms
}

stage_lnorms() {
  ab_dbench llm-norms device --ops layer_norm rms_norm --dirs fwd bwd --parts sweep --dtypes bfloat16 \
    --cols 896 1536 2048 2304 2560 3584 4096 4608 5120 7168 8192
}

stage_lsoftmax() {
  ab_dbench llm-softmax device --ops softmax --dirs fwd bwd --parts sweep --cols 32000 50257 128256 151936 256000
}

ab_init "$@"
ab_run v36
