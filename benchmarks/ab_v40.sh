#!/usr/bin/env bash
# The v40 device call (RESULTS.md "v40"): the tree whose defaults are v39 (the softmax backward's clusters that hold y
# alone) and v36 (the norms' odd teams) checked where the switch changed its tests, and v40 (JAX_MEMOPS_SOFTMAX_BWD=v40:
# clusters that hold 7 packs of y where they leave fewer thread slots idle) measured and checked. One call:
# `ab_v40.sh build sab dtest vtest race`. v40 was refuted (16-bit 0.92-0.93x): its code and test are on branch v40;
# on main JAX_MEMOPS_SOFTMAX_BWD=v40 runs the default, so sab reads an A/A there and vtest / race check the default.
#   sab     benchmarks/softmax_ab.py over JAX_MEMOPS_SOFTMAX_BWD = default, v40, default (the processes' A/A), softmax
#           bwd, f32 and bf16, device timing, at the widths v40 plans otherwise (and 32768, 131072: unchanged).
#   dtest   the plan, merge and norm version tests (default, v35) the new defaults touch (fresh processes), beside
#           each other; then the > 2^31-element bf16 524288 (v39's 16 CTAs of 512 threads holding y) and 600001
#           (v38's 15 of 1024) tests.
#   vtest   under v40 in process the backward's size classes and many rows; the > 2^31-element bf16 50257 test (2 CTAs
#           of 7 packs holding y).
#   race    compute-sanitizer over cluster_race.py under v40: racecheck (the rule, then messages at every k), memcheck.
set -uo pipefail
source "$(dirname "$0")/ab_lib.sh"

stage_sab() {
  timeout 200 python3 benchmarks/softmax_ab.py --var JAX_MEMOPS_SOFTMAX_BWD --versions default v40 default-again \
    --dirs bwd --dtypes float32 bfloat16 --timing device \
    --cols ${SAB_COLS:-32768 50257 100000 131072 200000} --out "$out/sab" > "$out/sab.log" 2>&1
  echo "rc=$?"
  grep -h "^|" "$out/sab.log"
}

stage_dtest() {
  BT_VERSIONS="default v35" ab_norm_btest "default v35" 3 &
  ab_gpu_tests dtest 250 "bwd_v39_y_held or bwd_v38_clusters or bwd_v40_tight or bwd_push_reduce" 240
  wait
  ab_big_tests "big_softmax_size_class and (524288 or 600001)"
  mv "$out/big.log" "$out/big-dtest.log"
}

stage_vtest() { ab_bwd_vtest v40 50257; }

stage_race() { ab_cluster_race v40 JAX_MEMOPS_SOFTMAX_BWD=v40; }

ab_init "$@"
ab_run v40
