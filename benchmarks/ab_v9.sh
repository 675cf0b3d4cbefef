#!/usr/bin/env bash
# The v9 experiments (one device call runs some stages; A/B by environment variable, one build):
#   bash benchmarks/ab_v9.sh build wide bwd test
# What is asked (benchmarks/RESULTS.md, "v9"):
#   wide  JAX_MEMOPS_SOFTMAX_FWD=v9-wide / v9-wide-512: register rows of 8 packs per thread (128 KB of
#         loads in flight per SM, v3 has 64 KB) up to 1024 / 512-thread CTAs, longer rows on register
#         clusters of such CTAs, against v5 (the default). Predicted: f32 8192-32768 and 16-bit
#         32768-65536 from 80-89% of the copy to >= 90% (one CTA holds a 32768-element f32 row: no
#         cluster), f32 50257 / 131072 on clusters of 2 / 4 CTAs (v5: one-buffer bulk copy, k = 2 / 8).
#   bwd   JAX_MEMOPS_SOFTMAX_BWD=v9-1024: the backward's register clusters of 1024-thread CTAs (half the
#         k) against 512-thread ones. Predicted: f32 50257 / 131072 from 80 / 77% of the copy-equivalent
#         toward 85% if cluster size is the cost, as in the forward.
#   test  the GPU tests of the new versions (fresh processes) and the softmax suite.
# After the rule landed (8-pack rows for f32 4096 < C <= 32768, 16-bit 2048 < C <= 32768; the backward's
# clusters 8 x 1024 before 16 x 512):
#   verify  the default against v5 (forward) and v8 (backward's cluster order), the issue's shapes.
#   (team6, run twice: JAX_MEMOPS_NORM_FWD=v9-6, 16-bit team rows of 6 packs, against the default at C = 768;
#   adopted for LayerNorm in v10, whose benchmarks/ab_v10.sh verify compares it with v3.)
#   check   compute-sanitizer (gpu_check.sh sanitize) and the > 2^31-element tests; the GPU suite.
set -uo pipefail
source "$(dirname "$0")/ab_lib.sh"

COLS=(128 512 1024 2048 4096 8192 16384 32768 50257 65536 131072)

stage_build() { ab_build || exit 1; }

stage_wide() {
  timeout 330 python3 benchmarks/softmax_ab.py --versions "" v9-wide v9-wide-512 --dtypes float32 bfloat16 \
    --cols "${COLS[@]}" --out "$out/wide" > "$out/wide.log" 2>&1
  grep -h "^|" "$out/wide.log"
}

stage_bwd() {
  timeout 150 python3 benchmarks/softmax_ab.py --var JAX_MEMOPS_SOFTMAX_BWD --versions "" v9-1024 --dirs bwd \
    --dtypes float32 bfloat16 --cols 8192 16384 32768 50257 131072 --out "$out/bwd" > "$out/bwd.log" 2>&1
  grep -h "^|" "$out/bwd.log"
}

stage_test() {
  ab_gpu_tests pytest-versions 200 "gpu and slow and not big" 190
  ab_gpu_tests pytest-softmax 200 "gpu and not slow and softmax"
}

stage_verify() {
  timeout 150 python3 benchmarks/softmax_ab.py --versions v5 "" --dtypes float32 bfloat16 --cols "${COLS[@]}" \
    --out "$out/verify-fwd" > "$out/verify-fwd.log" 2>&1
  grep -h "^|" "$out/verify-fwd.log"
  timeout 100 python3 benchmarks/softmax_ab.py --var JAX_MEMOPS_SOFTMAX_BWD --versions v8 "" --dirs bwd fwd+bwd \
    --dtypes float32 bfloat16 --cols 65536 131072 --out "$out/verify-bwd" > "$out/verify-bwd.log" 2>&1
  grep -h "^|" "$out/verify-bwd.log"
}

stage_check() { ab_check; }

stage_suite() { ab_gpu_tests pytest-suite 290 "gpu and not slow"; }

ab_init "$@"
ab_run ab-v9
