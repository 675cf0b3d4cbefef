#!/usr/bin/env bash
# The v21 measurements: v20's cached I/O (x by __ldg, y by plain stores) carried to the softmax forward's
# long rows (JAX_MEMOPS_SOFTMAX_FWD: v21-wide, the 8-pack block rows of 4096 (16-bit 2048) < C <= 32768;
# v21-store, plain stores in the bulk-copy clusters and the 16-bit L2 two-pass rows; v21, both).
#   build    this tree (sm_90).
#   test     the three versions' GPU test (fresh processes; every class, special rows, f32/bf16/f16) beside
#            compute-sanitizer memcheck over sanitize.py's softmax under JAX_MEMOPS_SOFTMAX_FWD=v21.
#   ab       the default against the three, forward, f32 and bf16, C = AB_COLS (default 4096 .. 131072),
#            ROUNDS rounds (default "1 2"), the bulk-copy plans logged.
set -uo pipefail
source "$(dirname "$0")/ab_lib.sh"

stage_build() { ab_build || exit 1; }

stage_test() {
  XLA_PYTHON_CLIENT_PREALLOCATE=false timeout 280 python3 -P -m pytest -q -rfE -n 3 --timeout 270 \
    -k "fwd_versions and v21" tests/test_softmax.py > "$out/versions.log" 2>&1 &
  JAX_MEMOPS_SOFTMAX_FWD=v21 XLA_PYTHON_CLIENT_PREALLOCATE=false XLA_FLAGS=--xla_gpu_enable_command_buffer= \
    timeout 270 compute-sanitizer --tool memcheck --kernel-name kns=softmax_fwd --error-exitcode 3 \
    python3 benchmarks/sanitize.py --only softmax > "$out/memcheck-v21.log" 2>&1
  echo "memcheck v21: $(grep -E 'SUMMARY|checks passed' "$out/memcheck-v21.log" | tail -2 | tr '\n' ' ')"
  wait
  tail -n 1 "$out/versions.log"
}

stage_ab() {
  # shellcheck disable=SC2086
  JAX_MEMOPS_SOFTMAX_PLAN_LOG=1 AB_TIMEOUT=${AB_TIMEOUT:-280} ab_rounds v21-r --var JAX_MEMOPS_SOFTMAX_FWD \
    --versions "" v21-wide v21-store v21 --ops softmax --dirs fwd --dtypes float32 bfloat16 \
    --cols ${AB_COLS:-4096 8192 16384 32768 50257 131072}
}

ab_init "$@"
ab_run ab-v21
