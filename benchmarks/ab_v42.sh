#!/usr/bin/env bash
# The v42 device calls (RESULTS.md "v42"): the softmax backward's default, v41's clusters of CTAs of any multiple of 32
# threads only where they keep as many CTAs resident as v38's 512-thread plan, against v39 (the default before) and
# v41, over the widths whose long rows take register clusters. Two calls: `ab_v42.sh build sab`, then
# `ab_v42.sh build vtest race` (the second ran `SAB_COLS="40000 75000" ab_v42.sh build sab fab vtest race`, v43's `fab`
# stage on branch v43).
#   sab     benchmarks/softmax_ab.py over JAX_MEMOPS_SOFTMAX_BWD = v39, default (v42), v41, softmax bwd, f32 and bf16,
#           device timing, with the plan log (JAX_MEMOPS_SOFTMAX_PLAN_LOG=1).
#   vtest   test_gpu_bwd_v42_keeps_ctas and test_gpu_bwd_v39_y_held (fresh processes); in process the backward's size
#           classes and many rows; the > 2^31-element bf16 50257 test (5 CTAs of 256 threads).
#   race    compute-sanitizer over cluster_race.py under the default: racecheck (the rule, then messages at every k),
#           memcheck.
set -uo pipefail
source "$(dirname "$0")/ab_lib.sh"

stage_sab() {
  JAX_MEMOPS_SOFTMAX_PLAN_LOG=1 timeout 300 python3 benchmarks/softmax_ab.py --var JAX_MEMOPS_SOFTMAX_BWD \
    --versions v39 default v41 --dirs bwd --dtypes float32 bfloat16 --timing device \
    --cols ${SAB_COLS:-8193 12289 16385 24577 32768 40000 50257 65536 75000 100000 131072 150001 200000 262144} \
    --out "$out/sab" > "$out/sab.log" 2>&1
  echo "rc=$?"
  grep -h "^|" "$out/sab.log"
}

stage_vtest() { ab_bwd_vtest "" 50257 "bwd_v42_keeps_ctas or bwd_v39_y_held"; }

stage_race() { ab_cluster_race v42; }

ab_init "$@"
ab_run v42
