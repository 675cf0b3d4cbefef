#!/usr/bin/env bash
# The v32 device calls for the norms: the 16-bit backward rows of K = 3 packs per thread one row ahead with the scale
# held, LayerNorm's partials in shared memory (cpp/norms.cu norm_bwd_lean; JAX_MEMOPS_NORM_BWD=v31 the kernels
# before). (The softmax experiments of v32 ran benchmarks/softmax_long_ab.cu on branch v32-ring, one call each.)
# Options the calls' trees had and this one does not: =v32-hold (the first call: RMSNorm's scale held, its default
# then the prefetch alone; tables benchmarks/h200/v32/rms_k3_*), =v32-ln3 / =v32-ln3-lean (the second: LayerNorm's
# K = 3 rows one row ahead, partials by quads, the scale held or not, RMSNorm's as now; tables k3_*).
#   btest    the norm backward versions' GPU tests for BT_VERSIONS (default "" and v31; every class, NaN-poured
#            outputs, bitwise determinism; C = 8200, 10000, 12288 among them).
#   ab       benchmarks/partials_ab.py once per kernel version, one process each (AB_VERSIONS, default "v32 v31 v32":
#            the last the processes' A/A), AB_OPS (default rms_norm) backward and forward + backward at AB_COLS
#            (default 8200 10000 12288) in AB_DTYPES (default bfloat16 float16); then each version's ms against the
#            first one's, case by case (files tagged AB_TAG, default rms_k3).
#            The second call: AB_OPS="rms_norm layer_norm" AB_COLS="768 1536 3072 6144 12288" AB_DTYPES=bfloat16
#            AB_VERSIONS="v32 v31 v32-ln3 v32-ln3-lean v32" AB_TAG=k3 (RMSNorm's change at every K = 3 width;
#            =v32-ln3 / =v32-ln3-lean: LayerNorm's K = 3 rows one row ahead, partials in shared memory by quads, the
#            scale held or not).
#   san      compute-sanitizer memcheck and racecheck over the backward kernels of SAN_OPS (default rms_norm;
#            sanitize.py --only), under the JAX_MEMOPS_NORM_BWD the call sets.
#   big      the > 2^31-element RMSNorm backward tests.
#   nbench   the bench's RMSNorm and LayerNorm backward and forward + backward, f32 and bf16, device timing.
set -uo pipefail
source "$(dirname "$0")/ab_lib.sh"

stage_build() { ab_build || exit 1; }

stage_btest() { ab_norm_btest "default v31" 2; }

stage_ab() {
  # shellcheck disable=SC2086
  ab_norm_versions "${AB_TAG:-rms_k3}" "v32 v31 v32" --ops ${AB_OPS:-rms_norm} --cols ${AB_COLS:-8200 10000 12288} \
    --dtypes ${AB_DTYPES:-bfloat16 float16}
}

stage_san() { ab_sanitize "v32${AB_TAG:+-$AB_TAG}" kns=norm_bwd 280 ${SAN_OPS:-rms_norm}; }

stage_big() { ab_big_tests "big_norm_backward_teams and rms"; }

stage_nbench() { ab_norm_nbench; }

ab_init "$@"
ab_run v32
