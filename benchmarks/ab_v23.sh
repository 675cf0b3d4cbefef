#!/usr/bin/env bash
# The v23 measurements: bf16 LayerNorm rows on norm_fwd_lean.cuh's kernel (block rows first, then team rows too:
# v22's `v22-one` read +2..8% at C = 2048, 8192, 12288 in each of three rounds) against the rule before it
# (JAX_MEMOPS_NORM_FWD=v21).
#   build    this tree (sm_90).
#   verify   the norms' forward GPU tests (size classes, large mean, row groups, the versions' test: every call
#            poisoned) beside compute-sanitizer memcheck and racecheck over sanitize.py's norms (kernels norm_fwd*;
#            resumed where a tool crashes itself: ab_sanitize_resume); then the > 2^31-element forwards.
#   ab       forward, bf16, LayerNorm (and RMSNorm, unchanged: a gauge of the noise), C = AB_COLS (default the
#            issue's six), the default against v21, ROUNDS rounds (default "1 2 3").
#   sweep    the bench's sweep for the norms' forward and fwd+bwd (f32, bf16), one process; result lines.
#   inproc   benchmarks/norm_fwd_ab.cu: the lean rows against v21 inside one process (variants interleaved per
#            sample, an A/A pair for the noise), since the bench's processes differed by as much as the effect;
#            IN_OPS (default all: ln-bf16 rms-bf16 ln-f32 rms-f32), IN_ROUNDS (default "1 2").
#   smxab    benchmarks/softmax_fwd_ab.cu: the softmax forward's short rows (C = 128, 512) in other geometries of
#            the register kernel, and three copies, inside one process.
#   gap      benchmarks/dispatch_gap.py: what a call costs beyond its kernel in the bench's loop, and inside a
#            chain of ops in one jitted call, with XLA's command buffers on and off.
#   smxv     v23's 16-bit 8-pack sub-warp rows of the softmax forward: its GPU tests (every version with v21, the
#            size classes, poisoned outputs) beside memcheck and racecheck over sanitize.py's softmax (kernels
#            softmax_fwd_regs*), then the bench's forward sweep at C = 128 .. 2048 (f32, bf16).
#   smx      the softmax forward's GPU tests (every version, the size classes, poisoned outputs) after
#            launch_fwd_v3's register rows went through one launch for both kCachedIo values.
set -uo pipefail
source "$(dirname "$0")/ab_lib.sh"

stage_build() { ab_build || exit 1; }

stage_verify() {
  ab_gpu_tests fwd-tests 330 "gpu and norm and not slow and not big and not backward" 320 &
  ab_sanitize_resume memcheck fwd kns=norm_fwd 200 --only layer_norm rms_norm
  ab_sanitize_resume racecheck fwd kns=norm_fwd 200 --only layer_norm rms_norm
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

stage_inproc() { ab_inproc; }

stage_smxab() { ab_smxab; }

stage_gap() {
  timeout 300 python3 benchmarks/dispatch_gap.py --out "$out" > "$out/gap.log" 2>&1
  cat "$out/gap.log"
}

stage_smxv() {
  local tool
  ab_gpu_tests smxv-tests 150 "gpu_fwd_versions or (gpu and (auto_size_classes_forward or stale_and_poisoned))" 140 &
  for tool in memcheck racecheck; do  # one run each (the device time left was short: no resume)
    XLA_PYTHON_CLIENT_PREALLOCATE=false XLA_FLAGS=--xla_gpu_enable_command_buffer= timeout 70 \
      compute-sanitizer --tool "$tool" --kernel-name kns=softmax_fwd_regs --error-exitcode 3 \
      python3 benchmarks/sanitize.py --fwd --only softmax > "$out/$tool-smx.log" 2>&1
    echo "$tool rc=$? $(grep -E 'SUMMARY|checks passed' "$out/$tool-smx.log" | tail -2 | tr '\n' ' ')"
  done
  wait
  timeout 60 python3 -P -m jax_memops.cli bench --ops softmax --dirs fwd --parts sweep --dtypes float32 bfloat16 \
    --cols 128 256 512 1024 2048 --out "$out/sweep-smx" > "$out/sweep-smx.log" 2>&1
  grep -E "^softmax" "$out/sweep-smx.log"
}

stage_smx() {
  ab_gpu_tests smx-tests 300 "gpu_fwd_versions or (gpu and (auto_size_classes_forward or stale_and_poisoned))" 280
}

ab_init "$@"
ab_run ab-v23
