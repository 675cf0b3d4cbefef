#!/usr/bin/env bash
# The v11 experiments (one device call runs some stages; A/B by environment variable, one build):
#   bash benchmarks/ab_v11.sh build push test sanitize
# Measured and removed (benchmarks/RESULTS.md, "v11"; branches v11-tail, v11-stagger): the softmax
# bulk-copy cluster's last partial round split off onto larger clusters (rounds.py: the per-row time is
# flat across a partial round; 0.91-1.01x), and the first wave's CTAs started in phase-shifted slots
# (JAX_MEMOPS_STAGGER; softmax long rows and bf16 LayerNorm 0.90-1.04x).
#   push      JAX_MEMOPS_SOFTMAX_PUSH: how the bulk-copy cluster merges each row's (max, sum): "0" the
#             cluster barrier and DSMEM reads for every k, "" the default (st.async messages into every
#             CTA's inbox for k >= 4, the barrier below), "1" messages for every k; f32 / bf16, C =
#             50257..262144. (Measured with a third variant, DSMEM stores + remote arrivals, on branch
#             v11-push: 0.90-0.99x of the barrier.)
#   test      the merge's GPU tests (fresh processes; 0, 1 and the default under several plans; the plan
#             log names each launch's merge).
#   sanitize  compute-sanitizer memcheck and racecheck over sanitize.py's softmax workload under
#             JAX_MEMOPS_SOFTMAX_PUSH=$SAN_PUSH (1 unless set). Racecheck with this kernel filter crashed
#             ("failed to handle a hardware exception") at f32 2 x 12288, which runs no bulk-copy kernel,
#             under every setting, the old default too: the race stage is the racecheck that counts.
#   race      racecheck over a bulk-copy-only workload under 0, 1 and the default, then the crash's control.
set -uo pipefail
source "$(dirname "$0")/ab_lib.sh"

stage_build() { ab_build || exit 1; }

stage_push() {
  timeout 150 python3 benchmarks/softmax_ab.py --var JAX_MEMOPS_SOFTMAX_PUSH --versions 0 "" 1 \
    --dtypes float32 bfloat16 --cols 50257 65536 131072 262144 --out "$out/push" > "$out/push.log" 2>&1
  grep -h "^|" "$out/push.log"
}

stage_test() {
  ab_gpu_tests pytest-push 220 "push_reduce" 180
}

stage_sanitize() {
  local tool
  for tool in memcheck racecheck; do
    JAX_MEMOPS_SOFTMAX_PUSH=${SAN_PUSH:-1} XLA_PYTHON_CLIENT_PREALLOCATE=false \
      XLA_FLAGS=--xla_gpu_enable_command_buffer= timeout 150 compute-sanitizer --tool $tool \
      --kernel-name kns=softmax_fwd_tma --error-exitcode 3 python3 benchmarks/sanitize.py --only softmax \
      > "$out/$tool-push.log" 2>&1
    echo "$tool rc=$? $(grep -E 'SUMMARY|passed' "$out/$tool-push.log" | tail -2 | tr '\n' ' ')"
  done
}

# race: racecheck over the bulk-copy cluster alone (benchmarks/cluster_race.py under the kernel filter
# kns=softmax_fwd_tma: misaligned rows, many rows per cluster, k from 1 to 16 by the plans; v11 ran its
# first five shapes, written inline here) under each JAX_MEMOPS_SOFTMAX_PUSH, and sanitize.py's softmax workload under "0" with the
# same kernel filter (the control: that run crashed at a shape no bulk-copy kernel runs, whatever the merge).
stage_race() {
  local push
  for push in 0 1 ""; do
    JAX_MEMOPS_SOFTMAX_PUSH=$push XLA_PYTHON_CLIENT_PREALLOCATE=false XLA_FLAGS=--xla_gpu_enable_command_buffer= \
      timeout 100 compute-sanitizer --tool racecheck --kernel-name kns=softmax_fwd_tma --error-exitcode 3 \
      python3 benchmarks/cluster_race.py > "$out/race-tma-$push.log" 2>&1
    echo "racecheck tma push=$push rc=$? $(grep -E 'SUMMARY|OK' "$out/race-tma-$push.log" | tail -2 | tr '\n' ' ')"
  done
  SAN_PUSH=0 stage_sanitize 2>&1 | grep racecheck
}

ab_init "$@"
ab_run ab-v11
