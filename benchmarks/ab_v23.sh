#!/usr/bin/env bash
# The v23 measurements: bf16 LayerNorm block rows on norm_fwd_lean.cuh's kernel (the default's candidate; v22's
# `v22-one` read +2..8% at C = 2048, 8192, 12288 in each of three rounds) against the rule before it
# (JAX_MEMOPS_NORM_FWD=v21).
#   build    this tree (sm_90).
#   verify   the norms' forward GPU tests (size classes, large mean, row groups, the versions' test: every call
#            poisoned) beside compute-sanitizer memcheck and racecheck over sanitize.py's norms (kernels norm_fwd*;
#            where a tool crashes itself, again from the check it was in); then the > 2^31-element forwards.
#   ab       forward, bf16, LayerNorm (and RMSNorm, unchanged: a gauge of the noise), C = AB_COLS (default the
#            issue's six), the default against v21, ROUNDS rounds (default "1 2 3").
#   sweep    the bench's sweep for the norms' forward and fwd+bwd (f32, bf16), one process; result lines.
set -uo pipefail
source "$(dirname "$0")/ab_lib.sh"

stage_build() { ab_build || exit 1; }

# san_resume TOOL: compute-sanitizer TOOL over sanitize.py's norms (forward kernels), resumed where it crashes.
san_resume() {
  local tool=$1 from=0 try rc last log
  for try in 1 2 3; do
    log="$out/$tool-$try.log"
    XLA_PYTHON_CLIENT_PREALLOCATE=false XLA_FLAGS=--xla_gpu_enable_command_buffer= timeout 200 \
      compute-sanitizer --tool "$tool" --kernel-name kns=norm_fwd --error-exitcode 3 \
      python3 benchmarks/sanitize.py --from $from --only layer_norm rms_norm > "$log" 2>&1
    rc=$?
    last=$(grep -oE '^\[[0-9]+\]' "$log" | tail -1 | tr -d '[]')
    echo "$tool --from $from: rc=$rc last check ${last:-none}:" \
      "$(grep -E 'SUMMARY|checks passed' "$log" | tail -2 | tr '\n' ' ')"
    if grep -q "checks passed" "$log" || [ -z "$last" ]; then break; fi
    if [ "$last" -eq "$from" ] && [ "$try" -gt 1 ]; then from=$((last + 1)); else from=$last; fi
  done
}

stage_verify() {
  ab_gpu_tests fwd-tests 330 "gpu and norm and not slow and not big and not backward" 320 &
  san_resume memcheck
  san_resume racecheck
  wait
  tail -n 1 "$out/fwd-tests.log"
  XLA_PYTHON_CLIENT_PREALLOCATE=false timeout 120 python3 -P -m pytest -q -rfEs --timeout 110 \
    -k "big_layer_norm_forward or big_rms_norm_forward or big_norm_team_rows" tests/test_gpu.py \
    > "$out/big.log" 2>&1
  tail -n 1 "$out/big.log"
}

stage_ab() {
  # shellcheck disable=SC2086
  ROUNDS=${ROUNDS:-1 2 3} AB_TIMEOUT=${AB_TIMEOUT:-120} ab_rounds nfwd-r --var JAX_MEMOPS_NORM_FWD \
    --versions "" v21 --ops layer_norm rms_norm --dirs fwd --dtypes bfloat16 \
    --cols ${AB_COLS:-768 1024 2048 4096 8192 12288}
}

stage_sweep() {
  timeout 200 python3 -P -m jax_memops.cli bench --ops layer_norm rms_norm --dirs fwd fwd+bwd --parts sweep \
    --dtypes float32 bfloat16 --out "$out/sweep-norms" > "$out/sweep-norms.log" 2>&1
  grep -E "^(layer|rms)_norm" "$out/sweep-norms.log"
}

ab_init "$@"
ab_run ab-v23
