#!/usr/bin/env bash
# The v21 measurements: v20's cached I/O (x by __ldg, y by plain stores) carried to the softmax forward's
# long rows. The experiment (commit 8d5e763, branch v21-store; RESULTS.md "v21") ran the stages below with
# three versions: v21-wide (the 8-pack block rows of 4096 (16-bit 2048) < C <= 32768: adopted, now the
# default), v21-store (plain stores in the bulk-copy clusters and the 16-bit L2 two-pass rows: not adopted)
# and both. Since then JAX_MEMOPS_SOFTMAX_FWD=v20 is the old default (streaming hints in the 8-pack rows).
#   build    this tree (sm_90).
#   test     the forward's GPU tests (the size classes, special values, poisoned outputs, many rows, the
#            version test of v20) beside compute-sanitizer memcheck and racecheck over sanitize.py's softmax
#            (kernels softmax_fwd_*), then the > 2^31-element forward.
#   race     compute-sanitizer racecheck over sanitize.py --fwd --only softmax (the forwards alone: the whole
#            workload's racecheck stops at f32 2 x 12288's backward on a cluster), kernels softmax_fwd_*; where
#            the tool itself crashes, resumed (ab_sanitize_resume).
#   ab       the default against v20, forward, f32 and bf16, C = AB_COLS (default 4096 .. 50257), ROUNDS
#            rounds (default "1 2").
#   sweep    the bench's sweep where the default changed (softmax fwd and fwd+bwd, f32 and bf16, C = 4096,
#            8192, 16384, 32768), one process; result lines shown.
set -uo pipefail
source "$(dirname "$0")/ab_lib.sh"

stage_build() { ab_build || exit 1; }

stage_test() { ab_softmax_fwd_verify v21 v20 kns=softmax_fwd; }

stage_race() { ab_sanitize_resume racecheck fwd kns=softmax_fwd 250 --fwd --only softmax; }

stage_ab() {
  # shellcheck disable=SC2086
  JAX_MEMOPS_SOFTMAX_PLAN_LOG=1 AB_TIMEOUT=${AB_TIMEOUT:-200} ab_rounds v21-r --var JAX_MEMOPS_SOFTMAX_FWD \
    --versions "" v20 --ops softmax --dirs fwd --dtypes float32 bfloat16 \
    --cols ${AB_COLS:-4096 8192 16384 32768 50257}
}

stage_sweep() {
  timeout 200 python3 -P -m jax_memops.cli bench --ops softmax --dirs fwd fwd+bwd --parts sweep \
    --dtypes float32 bfloat16 --cols 4096 8192 16384 32768 --out "$out/sweep" > "$out/sweep.log" 2>&1
  grep -E "^softmax" "$out/sweep.log"
}

ab_init "$@"
ab_run ab-v21
