#!/usr/bin/env bash
# The v17 measurements (one device call runs some stages):
#   src    Nsight Compute's warp-state sampling per SASS instruction (SourceCounters, PC sampling) over the
#          forward's long rows: f32 50257 (bulk-copy cluster, messages), f32 32768 (block rows, no
#          cluster), f32 131072 (bulk-copy cluster); NCU_CASES replaces them. The report (src.ncu-rep)
#          and its source page as CSV per kernel (src-<n>.csv) come back.
#   ab     this tree against build/old (the commit before, carried; v17 ran it on branch v17, where the
#          four-slot passes stay): the bulk-copy forward's shapes and controls, f32 / bf16 / f16, ROUNDS
#          (default two).
#   test   the bulk-copy cluster's GPU tests (TESTS replaces the expression).
#   race   compute-sanitizer racecheck (the merge rule, PUSH=1) and memcheck over cluster_race.py.
#   ad     forward mode (each op a custom_jvp whose tangent map grad transposes into the backward kernel)
#          against build/old (the custom_vjp ops): bwd and fwd+bwd of every op, f32 / bf16, ROUNDS rounds.
#   adtest the forward-mode and transformation tests on the GPU, and the ops' gradient tests.
#   s2     the two-buffer bulk-copy cluster (JAX_MEMOPS_SOFTMAX_FWD=v3: the next row's copy in flight through
#          the reduction, the merge and the output pass) now that k >= 4 merges by messages, at forced k
#          (JAX_MEMOPS_SOFTMAX_FWD_K = 4, 8, 16) against the one buffer at the same k, f32 long rows.
#   nl     the norms' long-row fused backward (branch v17-normlong) against build/old: GPU tests of the
#          backward partials and norm gradients, compute-sanitizer memcheck / racecheck over sanitize.py's
#          norm workload (fused backward kernels only), then one A/B round of bwd and fwd+bwd.
#   jvp    the bench's forward-mode direction (jax.jvp, ours against XLA's) over every op's default grid.
set -uo pipefail
source "$(dirname "$0")/ab_lib.sh"

stage_build() { ab_build || exit 1; }

stage_src() {
  local cases=${NCU_CASES:-softmax:fwd:float32:50257:ours softmax:fwd:float32:32768:ours \
    softmax:fwd:float32:131072:ours}
  # shellcheck disable=SC2086
  XLA_PYTHON_CLIENT_PREALLOCATE=false XLA_PYTHON_CLIENT_ALLOCATOR=platform timeout 200 \
    ncu --profile-from-start off --clock-control none --section WarpStateStats --section SourceCounters \
    --section SpeedOfLight --import-source yes -f -o "$out/src" python3 benchmarks/ncu_profile.py $cases \
    > "$out/src.log" 2>&1
  tail -3 "$out/src.log"
  ncu -i "$out/src.ncu-rep" --page source --csv --print-source sass > "$out/src-all.csv" 2> "$out/src-all.err"
  echo "all: $(wc -l < "$out/src-all.csv") lines $(head -c 300 "$out/src-all.err")"
  local n
  for n in $(seq 0 $(($(echo $cases | wc -w) - 1))); do
    ncu -i "$out/src.ncu-rep" --page source --csv --print-source sass --launch-skip "$n" --launch-count 1 \
      > "$out/src-$n.csv" 2> "$out/src-$n.err"
    echo "kernel $n: $(wc -l < "$out/src-$n.csv") lines $(head -c 300 "$out/src-$n.err")"
  done
  ncu --help > "$out/ncu-help.txt" 2>&1
  ncu -i "$out/src.ncu-rep" --page details --print-details all > "$out/src-details.txt" 2>&1
  grep -E "^  [a-zA-Z_v]|Duration|Warp Cycles Per Issued|Long Scoreboard" "$out/src-details.txt" | cut -c1-150
}

stage_ab() {
  ab_build_old || { tail -20 "$out/build-old.log"; return 1; }
  local round
  for round in ${ROUNDS:-1 2}; do
    ab_against_old "ab-r$round" --dtypes float32 bfloat16 float16 \
      --cols ${AB_COLS:-8192 32768 50257 65536 100000 131072 262144}
  done
}

stage_test() {
  ab_gpu_tests pytest-v17 400 \
    "${TESTS:-fwd_versions or fwd_cluster_plans or tie_rule or push_reduce or l2_rule or (softmax and gpu and 50257)}" 300
  grep -E "^(FAILED|ERROR)" "$out/pytest-v17.log" | cut -c1-200
  return 0
}

stage_race() { ab_cluster_race v17; }

stage_ad() {
  ab_build_old || { tail -20 "$out/build-old.log"; return 1; }
  local round
  for round in ${ROUNDS:-1 2}; do
    ab_against_old "ad-r$round" --ops softmax layer_norm rms_norm gelu --dirs bwd fwd+bwd \
      --dtypes float32 bfloat16 --cols ${AB_COLS:-1024 50257}
  done
}

stage_adtest() {
  ab_gpu_tests pytest-ad 420 "${TESTS:-gpu and not big and (forward_mode or transforms or grad_matches_xla or \
    grad_masked or grad_optional or grad_no_scale or grad_scale_bias_kinds or flax)}" 300
  grep -E "^(FAILED|ERROR)" "$out/pytest-ad.log" | cut -c1-200
  return 0
}

stage_s2() {
  local kc k cols
  for kc in "4:50257 65536" "8:65536 131072" "16:131072 262144"; do
    k=${kc%%:*}
    cols=${kc#*:}
    # shellcheck disable=SC2086
    JAX_MEMOPS_SOFTMAX_FWD_K=$k JAX_MEMOPS_SOFTMAX_PLAN_LOG=1 ab_rounds "s2-k$k-r" --var JAX_MEMOPS_SOFTMAX_FWD \
      --versions "" v3 --dtypes float32 --cols $cols
  done
}

stage_nl() {
  ab_build_old > /dev/null 2>&1 &
  ab_gpu_tests pytest-nl 200 "${TESTS:-backward_partials or (gpu and norm and grad)}" 150
  grep -E "^(FAILED|ERROR)" "$out/pytest-nl.log" | cut -c1-200
  ab_norm_sanitize nl kns=norm_bwd_fused 150
  ROUNDS=1 ab_against_old "nl-r1" --ops layer_norm rms_norm --dirs bwd fwd+bwd --dtypes float32 bfloat16 \
    --cols ${AB_COLS:-12288 16384 24576}
}

stage_jvp() {
  timeout 300 python3 -P -m jax_memops.cli bench --parts sweep --dirs jvp --dtypes float32 bfloat16 \
    --out "$out/jvp" > "$out/jvp.log" 2>&1
  grep -E "^(softmax|layer_norm|rms_norm|gelu) " "$out/jvp.log"
}

ab_init "$@"
ab_run ab-v17
