#!/usr/bin/env bash
# The v12 experiments (one device call runs some stages; A/B by environment variable, one build):
#   bash benchmarks/ab_v12.sh build mail push explore order test big race final fwdk fwdk-map
#   mail   the backward's register clusters (f32 C = 32768: k = 4 of 512 threads, 50257: 7, 131072: 8 of
#          1024; bf16 32768: 2, 50257: 4, 131072: 8 of 512) merging each row's sum(dy * y) by messages
#          (mail_merge, softmax_rows.cuh) against the cluster barrier and DSMEM reads:
#          JAX_MEMOPS_SOFTMAX_PUSH 0 (barrier), default (messages from k = 4), 1 (messages); bwd and
#          fwd+bwd, f32 / bf16. Predicted from v11's forward (+3 to +18% at k >= 4): f32 50257 79-82% ->
#          ~85% of the copy. (Its first run, RESULTS "v12", compared the same message kernel under
#          JAX_MEMOPS_SOFTMAX_BWD=v12-mail, the A/B switch before the rule.)
#   push   the forward's merge (JAX_MEMOPS_SOFTMAX_PUSH 0, default, 1) again: its kernel now calls the
#          shared mail_merge (SASS changed by scheduling from v11's measured one).
#   explore with messages in place, do larger clusters pay now? The forward at 50257 / 65536 with the
#          bulk-copy cluster size forced (JAX_MEMOPS_SOFTMAX_FWD_K 2, 4, 8: k >= 4 merge by messages;
#          the planner picks k = 2 at f32 50257 as a tie on CTAs resident, counted to 2 per SM); the f32
#          backward at 65537 / 131072 in v8's order (16 CTAs of 512 threads before 8 of 1024: 2 CTAs
#          per SM, a barrier over 16 cost v9 10%). (Run at 8a7214a, where "v8" named that order.)
#   order  the backward's register-cluster order with messages: the default (v2's again: 16 CTAs of 512
#          before 8 of 1024) against JAX_MEMOPS_SOFTMAX_BWD=v9 (8 of 1024 first); f32 65537 / 131072, bf16
#          196608 / 262144 (only there do the orders differ), bwd and fwd+bwd, two rounds.
#   test   the merge tests (forward and backward, every variable value), the backward's cluster orders,
#          the grids and the bulk-copy plans (fresh processes).
#   big    the cluster classes past element 2^31 (bf16 16385 x 131072: the backward's k = 8 by messages).
#   final  the softmax figures at C = 32768, 50257, 131072 (every direction, f32 / bf16) for README.
#   fwdk   the forward at 40000 / 50257 with k = 4 forced (messages) against the planner's (f32 k = 2 by
#          the barrier, bf16 k = 1), two rounds: explore's single run showed +2 to +7%.
#   fwdk-map  where k = 4 pays: C = 45000 .. 60000 with k = 2, 4 forced against the planner's, one round.
#   race   compute-sanitizer racecheck (default and PUSH=1: messages at k = 2, 3 too) and memcheck
#          (default) over the cluster kernels alone (benchmarks/cluster_race.py: bulk-copy forward and
#          register-cluster backward, misaligned rows, many rows per cluster; sanitize.py's softmax
#          workload with a kernel filter crashed the tool in v11). The session's runs had the same shapes
#          inline, with a bf16 y bound of 2e-2 (the script: 1e-2, v11's).
set -uo pipefail
source "$(dirname "$0")/ab_lib.sh"

stage_build() { ab_build || exit 1; }

stage_mail() {
  ab_rounds mail --var JAX_MEMOPS_SOFTMAX_PUSH --versions 0 "" 1 --dirs bwd fwd+bwd --dtypes float32 bfloat16 \
    --cols 32768 50257 131072
}

stage_push() {
  timeout 150 python3 benchmarks/softmax_ab.py --var JAX_MEMOPS_SOFTMAX_PUSH --versions 0 "" 1 \
    --dtypes float32 bfloat16 --cols 50257 65536 131072 262144 --out "$out/push" > "$out/push.log" 2>&1
  grep -h "^|" "$out/push.log"
}

stage_explore() {
  timeout 150 python3 benchmarks/softmax_ab.py --var JAX_MEMOPS_SOFTMAX_FWD_K --versions "" 2 4 8 \
    --dtypes float32 bfloat16 --cols 50257 65536 --out "$out/fwdk" > "$out/fwdk.log" 2>&1
  grep -h "^|" "$out/fwdk.log"
  timeout 100 python3 benchmarks/softmax_ab.py --var JAX_MEMOPS_SOFTMAX_BWD --versions "" v8 \
    --dirs bwd --dtypes float32 --cols 65537 131072 --out "$out/bwd16" > "$out/bwd16.log" 2>&1
  grep -h "^|" "$out/bwd16.log"
}

stage_order() {
  local round
  for round in ${ROUNDS:-1 2}; do
    timeout 120 python3 benchmarks/softmax_ab.py --var JAX_MEMOPS_SOFTMAX_BWD --versions "" v9 \
      --dirs bwd fwd+bwd --dtypes float32 --cols 65537 131072 --out "$out/order-f32-$round" \
      > "$out/order-f32-$round.log" 2>&1
    timeout 120 python3 benchmarks/softmax_ab.py --var JAX_MEMOPS_SOFTMAX_BWD --versions "" v9 \
      --dirs bwd fwd+bwd --dtypes bfloat16 --cols 196608 262144 --out "$out/order-bf16-$round" \
      > "$out/order-bf16-$round.log" 2>&1
    grep -h "^|" "$out/order-f32-$round.log" "$out/order-bf16-$round.log"
  done
}

stage_final() { ab_softmax_final; }

stage_fwdk() {
  AB_TIMEOUT=100 ab_rounds fwdk4- --var JAX_MEMOPS_SOFTMAX_FWD_K --versions "" 4 --dtypes float32 bfloat16 \
    --cols 40000 50257
}

stage_fwdk-map() {
  timeout 150 python3 benchmarks/softmax_ab.py --var JAX_MEMOPS_SOFTMAX_FWD_K --versions "" 2 4 \
    --dtypes float32 bfloat16 --cols 45000 50257 55000 60000 --out "$out/fwdk-map" > "$out/fwdk-map.log" 2>&1
  grep -h "^|" "$out/fwdk-map.log"
}

stage_test() {
  ab_gpu_tests pytest-merge 300 "${TESTS:-push_reduce or gpu_bwd_versions or gpu_grid or fwd_cluster_plans}" 250
}

stage_big() {
  XLA_PYTHON_CLIENT_PREALLOCATE=false timeout 200 python3 -P -m pytest -q -rfE --timeout 180 \
    -k "big_softmax_size_class" tests > "$out/pytest-big.log" 2>&1
  tail -n 1 "$out/pytest-big.log"
}

stage_race() { ab_cluster_race cluster; }

ab_init "$@"
ab_run ab-v12
