#!/usr/bin/env bash
# The v37 device calls, prepared in a session that had no device (RESULTS.md "v37"): the softmax backward's register
# clusters of 5 packs per thread where they take fewer CTAs (JAX_MEMOPS_SOFTMAX_BWD=v37), and v36's odd norm teams in
# the form committed after v36's device calls (JAX_MEMOPS_NORM_BWD=v36: the power-of-two kernels v35's, the odd teams'
# sums without a modulo per row). Planned as two calls: `ab_v37.sh build sab nab` (the A/Bs, nothing else on the GPU),
# then `ab_v37.sh build verify`.
#   sab     benchmarks/softmax_ab.py over JAX_MEMOPS_SOFTMAX_BWD = default, v37, default (the last the processes' A/A),
#           softmax bwd, f32 and bf16, device timing, at the long rows (SAB_COLS; default the widths whose cluster
#           the rule changes, beside 32768 and 65536, which it leaves alone).
#   nab     benchmarks/partials_ab.py once per JAX_MEMOPS_NORM_BWD of AB_VERSIONS (default "v35 v36 v35"), bf16 bwd of
#           both norms at the widths v36's rule takes (and at 4096 / 12288, which it leaves alone).
#   stest   the softmax backward's GPU tests under v37 (fresh processes: test_gpu_bwd_wide_clusters; in process, with
#           the variable set: the size classes, many rows, special values), beside the default's push-reduce test.
#   ssan    compute-sanitizer memcheck and racecheck over the softmax backward kernels under v37, resumed where the
#           tool itself crashes (racecheck has stopped at cluster backward launches before: RESULTS.md "v11").
#   sbig    the > 2^31-element softmax tests under v37 (bf16 50257: 3 CTAs, 131072: 7).
#   nver    the norms' backward versions tests (default, v36), their > 2^31-element tests, memcheck and racecheck
#           under v36 (ab_v36.sh's verify, on the committed form).
#   verify  stest, then sbig, beside ssan; then nver.
set -uo pipefail
source "$(dirname "$0")/ab_lib.sh"

stage_sab() {
  timeout 420 python3 benchmarks/softmax_ab.py --var JAX_MEMOPS_SOFTMAX_BWD --versions default v37 default-again \
    --dirs bwd --dtypes float32 bfloat16 --timing device \
    --cols ${SAB_COLS:-16385 32768 50257 65536 100000 131072 131073 262144} --out "$out/sab" > "$out/sab.log" 2>&1
  echo "rc=$?"
  grep -h "^|" "$out/sab.log"
}

stage_nab() {
  # shellcheck disable=SC2086
  ab_norm_versions nab "v35 v36 v35" --ops layer_norm rms_norm --dirs bwd \
    --cols ${AB_COLS:-2056 2304 3584 4104 4608 5000 5120 8200 9216 4096 12288} --dtypes bfloat16
}

stage_stest() {
  ab_gpu_tests stest 280 "bwd_wide_clusters or bwd_push_reduce" 270
  JAX_MEMOPS_SOFTMAX_BWD=v37 ab_gpu_tests stest-v37 280 \
    "softmax and (auto_size_classes_backward or auto_many_rows or special or nan_row or masked or huge_logits)" 270
}

stage_ssan() {
  JAX_MEMOPS_SOFTMAX_BWD=v37 ab_sanitize_resume memcheck v37 kns=softmax_bwd 200 --only softmax &
  JAX_MEMOPS_SOFTMAX_BWD=v37 ab_sanitize_resume racecheck v37 kns=softmax_bwd 200 --only softmax
  wait
}

stage_sbig() { JAX_MEMOPS_SOFTMAX_BWD=v37 ab_big_tests "big_softmax_size_class and (50257 or 131072)"; }

stage_nver() { ab_norm_nver v36; }

stage_verify() {
  { stage_stest; stage_sbig; } &
  stage_ssan
  wait
  stage_nver
}

ab_init "$@"
ab_run v37
