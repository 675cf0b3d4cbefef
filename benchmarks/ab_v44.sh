#!/usr/bin/env bash
# The v44 device calls (RESULTS.md "v44"): the norms' forward lean rows with cached I/O and f32 block rows with their
# parameters held in registers; the bulk-copy forward's score cap. Three calls: `ab_v44.sh early build cap` (its early
# and cap stages on branch v44-l1, where the L1-prefetch column and JAX_MEMOPS_SOFTMAX_FWD_CAP live), `ab_v44.sh io`,
# then `ab_v44.sh build v44 verify`, then `FROM=121 ab_v44.sh build bigm nbench`.
#   early   benchmarks/norm_fwd_ab.cu modes early-f32 and early-bf16 (in process, every output checked), twice.
#   io      benchmarks/norm_fwd_ab.cu mode io (the lean rows with cached I/O, the softmax rows beside them), twice.
#   v44     norm_fwd_ab.cu mode v44: the rule since v44 against v29's, one round.
#   verify  the norms' forward GPU tests (versions: the default and v29 among them) beside compute-sanitizer
#           memcheck and racecheck over every norm forward kernel (sanitize.py --fwd).
#   big     the > 2^31-element norm forward tests (f32 2048, bf16 4096).
#   mresume memcheck over sanitize.py --fwd from check $FROM (the tool's own SIGSEGV ended the verify stage's run),
#           beside the big stage.
#   nbench  the bench's LayerNorm and RMSNorm forward, f32 and bf16, device timing.
#   cap     benchmarks/softmax_ab.py over JAX_MEMOPS_SOFTMAX_FWD_CAP = default (2), 3, 4: the bulk-copy forward's score
#           counting up to n resident CTAs per SM, softmax fwd, f32 and bf16, device timing, with the plan log.
set -uo pipefail
source "$(dirname "$0")/ab_lib.sh"

stage_early() { ab_norm_fwd_rounds early 240 early-f32 early-bf16; }

stage_io() { ab_norm_fwd_rounds io 240 io; }

stage_v44() { IN_ROUNDS=1 ab_norm_fwd_rounds v44 200 v44; }

stage_verify() { ab_norm_fwd_verify; }

stage_big() { ab_big_tests "big_norm_forward_f32 or big_layer_norm_forward or big_rms_norm_forward"; }

stage_mresume() {
  XLA_PYTHON_CLIENT_PREALLOCATE=false XLA_FLAGS=--xla_gpu_enable_command_buffer= timeout 200 \
    compute-sanitizer --tool memcheck --kernel-name kns=norm_fwd --error-exitcode 3 python3 benchmarks/sanitize.py \
    --fwd --from "${FROM:-0}" --only layer_norm layer_norm_scale layer_norm_noparams rms_norm \
    > "$out/memcheck-nfwd-from${FROM:-0}.log" 2>&1
  echo "rc=$? memcheck from ${FROM:-0}: $(grep -cE '^\[' "$out/memcheck-nfwd-from${FROM:-0}.log") checks;" \
    "$(grep -E 'SUMMARY|checks passed' "$out/memcheck-nfwd-from${FROM:-0}.log" | tr '\n' ' ')"
}

stage_bigm() {  # big and mresume side by side
  stage_mresume > "$out/mresume.txt" &
  stage_big
  wait
  cat "$out/mresume.txt"
}

stage_nbench() { ab_dbench nbench-fwd device --ops layer_norm rms_norm --dirs fwd --parts sweep; }

stage_cap() {
  JAX_MEMOPS_SOFTMAX_PLAN_LOG=1 timeout 330 python3 benchmarks/softmax_ab.py --var JAX_MEMOPS_SOFTMAX_FWD_CAP \
    --versions default 3 4 --dirs fwd --dtypes float32 bfloat16 --timing device \
    --cols ${CAP_COLS:-40000 50257 55000 65536 100000 131072 150001 262144} --out "$out/cap" > "$out/cap.log" 2>&1
  echo "rc=$?"
  grep -h "^|" "$out/cap.log"
}

ab_init "$@"
ab_run v44
