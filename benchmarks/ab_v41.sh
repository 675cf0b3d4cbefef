#!/usr/bin/env bash
# The v41 device call, prepared after the device time was spent (RESULTS.md "v41"): the softmax backward's register
# clusters on CTAs of any multiple of 32 threads where those keep more rows in flight (JAX_MEMOPS_SOFTMAX_BWD=v41)
# against the default (v39). One call: `ab_v41.sh build sab vtest race` (~6 minutes of device time with the start).
#   sab     benchmarks/softmax_ab.py over JAX_MEMOPS_SOFTMAX_BWD = default, v41, default again (the processes' A/A),
#           softmax bwd, f32 and bf16, device timing, at the widths v41 plans otherwise (and 50257 f32, 131072 f32 and
#           150001 f32, which it leaves alone by the model); the plan log kept (JAX_MEMOPS_SOFTMAX_PLAN_LOG=1).
#   vtest   test_gpu_bwd_v41_odd_ctas (fresh processes); under v41 in process the backward's size classes and many
#           rows; the > 2^31-element bf16 50257 test under v41.
#   race    compute-sanitizer over cluster_race.py under v41: racecheck (the rule, then messages at every k), memcheck.
set -uo pipefail
source "$(dirname "$0")/ab_lib.sh"

stage_sab() {
  JAX_MEMOPS_SOFTMAX_PLAN_LOG=1 timeout 240 python3 benchmarks/softmax_ab.py --var JAX_MEMOPS_SOFTMAX_BWD \
    --versions default v41 default-again --dirs bwd --dtypes float32 bfloat16 --timing device \
    --cols ${SAB_COLS:-8193 16385 32768 50257 65536 131072 150001} --out "$out/sab" > "$out/sab.log" 2>&1
  echo "rc=$?"
  grep -h "^|" "$out/sab.log"
  grep -h "softmax_bwd v41: register" "$out/sab.log" | sort | uniq | cut -c1-140
}

stage_vtest() { ab_bwd_vtest v41 50257 bwd_v41_odd_ctas; }

stage_race() { ab_cluster_race v41 JAX_MEMOPS_SOFTMAX_BWD=v41; }

ab_init "$@"
ab_run v41
