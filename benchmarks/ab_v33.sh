#!/usr/bin/env bash
# The v33 device calls for the norms: the backward's rows through stages of shared memory (bulk copies of the next
# rows' x and dy; cpp/norm_bwd_lean.cuh kStages; cpp/norms.cu norm_bwd_version: =v32 the kernels before). Options
# the earlier calls' trees had and this one does not: =v33-s2 / =v33-s3 (call 1: two / three stages wherever a team
# has 64 threads or more; tables benchmarks/h200/v33/call1_*), =v33-all (call 2: two stages there) and =v33-rms2
# (call 2: v33's rule, and RMSNorm's 16-bit rows of 769..1024 packs on one staged 512-thread team of K = 2, which
# v33 adopted; tables call2_*).
#   btest    the norm backward versions' GPU tests for BT_VERSIONS (default "default v32 v31"; every class,
#            NaN-poured outputs, bitwise determinism).
#   ab       benchmarks/partials_ab.py once per kernel version, one process each (AB_VERSIONS, default
#            "v32 v33 v32": the last the processes' A/A), AB_OPS (default layer_norm rms_norm) in AB_DIRS
#            (default bwd) at AB_COLS (default 1024 4096 8192 12288) in AB_DTYPES (default bfloat16 float32); then each
#            version's ms against the first one's, case by case (files tagged AB_TAG, default stage).
#   san      compute-sanitizer memcheck and racecheck over the backward kernels of SAN_OPS (default layer_norm
#            rms_norm; sanitize.py --only), under the JAX_MEMOPS_NORM_BWD the call sets.
#   big      the > 2^31-element LayerNorm and RMSNorm backward tests.
#   verify   btest beside san (the tests in the background), then big.
#   ptest    the norms' backward tests on the GPU (paired blocks, determinism, partials, tests/test_norms.py grads).
#   nbench   the bench's RMSNorm and LayerNorm backward and forward + backward, f32 and bf16, device timing.
set -uo pipefail
source "$(dirname "$0")/ab_lib.sh"

stage_build() { ab_build || exit 1; }

stage_btest() { ab_norm_btest "default v32 v31" 3; }

stage_ab() {
  # shellcheck disable=SC2086
  ab_norm_versions "${AB_TAG:-stage}" "v32 v33 v32" --ops ${AB_OPS:-layer_norm rms_norm} --dirs ${AB_DIRS:-bwd} \
    --cols ${AB_COLS:-1024 4096 8192 12288} --dtypes ${AB_DTYPES:-bfloat16 float32}
}

stage_san() { ab_sanitize "v33${AB_TAG:+-$AB_TAG}" kns=norm_bwd 280 ${SAN_OPS:-layer_norm rms_norm}; }

stage_verify() {
  stage_btest &
  stage_san
  stage_big
}

stage_big() { ab_big_tests "big_layer_norm_backward or big_norm_backward_teams"; }

stage_ptest() { ab_norm_ptest; }

stage_nbench() { ab_norm_nbench; }

ab_init "$@"
ab_run v33
