#!/usr/bin/env bash
# The v34 device calls for the norms: f32 backward rows of C = 8196..12288 on the lean kernel's 512-thread teams of
# K = 6 packs (cpp/norms.cu norm_bwd_version: =v33 gives norm_bwd_fused_kernel there, the kernel before; =v34-chunks
# RMSNorm's rows in registers through one stage in parts). The trees of calls 1-2 and 6 had other options: call 1's
# default took both norms' rows in registers through one stage (whole), call 2's =v34-chunks both in parts; call 6's
# =v34-smem read the rows from two stages without holding the scale (tables call1_*, call2_*, call6_*).
#   btest    the norm backward versions' GPU tests for BT_VERSIONS (default "default v33"; every class, NaN-poured
#            outputs, bitwise determinism).
#   ab       benchmarks/partials_ab.py once per kernel version, one process each (AB_VERSIONS, default "v33 v34 v33":
#            the last the processes' A/A), AB_OPS (default layer_norm rms_norm) in AB_DIRS (default bwd fwd+bwd) at
#            AB_COLS (default 8192 9216 10000 12288; 8192 runs the same kernel in both) in AB_DTYPES (default float32);
#            then each version's ms against the first one's, case by case (files tagged AB_TAG, default stage).
#   san      compute-sanitizer memcheck and racecheck over the backward kernels of SAN_OPS (default layer_norm
#            rms_norm; sanitize.py --only).
#   big      the > 2^31-element LayerNorm and RMSNorm backward tests (f32 LayerNorm at C = 12288 among them).
#   verify   btest beside san (the tests in the background), then big.
#   sanr     san's two tools side by side, each resumed where the tool itself crashes (ab_sanitize_resume; call 3's
#            san ended in both tools' SIGSEGV, memcheck after check 27, racecheck after 15).
#   nbench   the bench's RMSNorm and LayerNorm backward and forward + backward, f32 and bf16, device timing.
set -uo pipefail
source "$(dirname "$0")/ab_lib.sh"

stage_btest() { ab_norm_btest "default v33" 3; }

stage_ab() {
  # shellcheck disable=SC2086
  ab_norm_versions "${AB_TAG:-stage}" "v33 v34 v33" --ops ${AB_OPS:-layer_norm rms_norm} \
    --dirs ${AB_DIRS:-bwd fwd+bwd} --cols ${AB_COLS:-8192 9216 10000 12288} --dtypes ${AB_DTYPES:-float32}
}

stage_san() { ab_sanitize "v34${AB_TAG:+-$AB_TAG}" kns=norm_bwd 280 ${SAN_OPS:-layer_norm rms_norm}; }

stage_verify() {
  stage_btest &
  stage_san
  stage_big
}

stage_sanr() { ab_norm_sanr v34; }

stage_big() { ab_norm_big; }

stage_nbench() { ab_norm_nbench; }

ab_init "$@"
ab_run v34
