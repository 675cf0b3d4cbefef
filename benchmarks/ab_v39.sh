#!/usr/bin/env bash
# The v39 device calls, prepared in a session whose device time was spent (RESULTS.md "v39"): the softmax backward's
# clusters that hold y alone and read dy twice (JAX_MEMOPS_SOFTMAX_BWD=v39) against v38, the default; then the
# verification that v36's odd norm teams (JAX_MEMOPS_NORM_BWD=v36, measured 1.09-1.10x in v38's calls) need before
# they become the default. Two calls: `ab_v39.sh build sab vtest race`, then `ab_v39.sh build nver`.
#   sab     benchmarks/softmax_ab.py over JAX_MEMOPS_SOFTMAX_BWD = default (v38), v39, softmax bwd, f32 and bf16,
#           device timing, at the widths v39 plans otherwise (and 327680, 600001, which it leaves to v38).
#   vtest   test_gpu_bwd_v39_y_held (fresh process); under v39 in process the backward's size classes and many rows;
#           the > 2^31-element bf16 524288 test under v39 (16 CTAs of 512 threads holding y).
#   race    compute-sanitizer over cluster_race.py under v39: racecheck (the rule, then messages at every k), memcheck.
#   nver    the norms' backward versions tests (default, v36), their > 2^31-element tests, memcheck and racecheck
#           under v36 (ab_v37.sh's nver).
#   dverify the default's checks left from v38's calls (merge by messages from k = 2): the backward's size classes
#           and many rows in process, and the > 2^31-element bf16 50257 test (its 3-CTA plan past 2^31 elements).
set -uo pipefail
source "$(dirname "$0")/ab_lib.sh"

stage_sab() {
  timeout 240 python3 benchmarks/softmax_ab.py --var JAX_MEMOPS_SOFTMAX_BWD --versions default v39 \
    --dirs bwd --dtypes float32 bfloat16 --timing device \
    --cols ${SAB_COLS:-196608 256000 262144 327680 524288 600001 1000003} --out "$out/sab" > "$out/sab.log" 2>&1
  echo "rc=$?"
  grep -h "^|" "$out/sab.log"
}

stage_vtest() { ab_bwd_vtest v39 524288 bwd_v39_y_held; }

stage_race() { ab_cluster_race v39 JAX_MEMOPS_SOFTMAX_BWD=v39; }

stage_nver() { ab_norm_nver v36; }

stage_dverify() {
  ab_gpu_tests dverify 250 "gpu and softmax and (auto_size_classes_backward or auto_many_rows)" 240
  ab_big_tests "big_softmax_size_class and 50257"
  mv "$out/big.log" "$out/big-dverify.log"
}

ab_init "$@"
ab_run v39
