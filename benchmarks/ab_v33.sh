#!/usr/bin/env bash
# The v33 device calls for the norms: the backward's rows through stages of shared memory (bulk copies of the next
# rows' x and dy; cpp/norm_bwd_lean.cuh kStages; cpp/norms.cu norm_bwd_version: =v32 the kernels before). Options
# the earlier calls' trees had and this one does not: =v33-s2 / =v33-s3 (call 1: two / three stages wherever a team
# has 64 threads or more; tables benchmarks/h200/v33/call1_*), =v33-all (call 2: two stages there) and =v33-rms2
# (call 2: v33's rule, and RMSNorm's 16-bit rows of 769..1024 packs on one staged 512-thread team of K = 2, which
# v33 adopted; tables call2_*).
#   btest    the norm backward versions' GPU tests for BT_VERSIONS (default "default v32 v31"; every class,
#            NaN-poured outputs, bitwise determinism).
#   ab       benchmarks/partials_ab.py once per kernel version, one process each (AB_VERSIONS, default
#            "v32 v33 v32": the last the processes' A/A), AB_OPS (default layer_norm rms_norm) in AB_DIRS
#            (default bwd) at AB_COLS (default 1024 4096 8192 12288) in AB_DTYPES (default bfloat16 float32); then each
#            version's ms against the first one's, case by case (files tagged AB_TAG, default stage).
#   san      compute-sanitizer memcheck and racecheck over the backward kernels of SAN_OPS (default layer_norm
#            rms_norm; sanitize.py --only), under the JAX_MEMOPS_NORM_BWD the call sets.
#   big      the > 2^31-element LayerNorm and RMSNorm backward tests.
#   verify   btest beside san (the tests in the background), then big.
#   ptest    the norms' backward tests on the GPU (paired blocks, determinism, partials, tests/test_norms.py grads).
#   nbench   the bench's RMSNorm and LayerNorm backward and forward + backward, f32 and bf16, device timing.
set -uo pipefail
source "$(dirname "$0")/ab_lib.sh"

stage_build() { ab_build || exit 1; }

stage_btest() {
  local t=tests/test_gpu.py::test_norm_backward_versions v ids=()
  for v in ${BT_VERSIONS-default v32 v31}; do ids+=("$t[${v#default}]"); done
  XLA_PYTHON_CLIENT_PREALLOCATE=false timeout 250 python3 -P -m pytest -q -rfE -n 3 --timeout 240 "${ids[@]}" \
    > "$out/btest${AB_TAG:+-$AB_TAG}.log" 2>&1
  tail -n 1 "$out/btest${AB_TAG:+-$AB_TAG}.log"
}

stage_ab() {
  local v i=0
  for v in ${AB_VERSIONS:-v32 v33 v32}; do
    i=$((i + 1))
    # shellcheck disable=SC2086
    JAX_MEMOPS_NORM_BWD=$v timeout 200 python3 -P benchmarks/partials_ab.py --variants default default \
      --ops ${AB_OPS:-layer_norm rms_norm} --dirs ${AB_DIRS:-bwd} --cols ${AB_COLS:-1024 4096 8192 12288} \
      --dtypes ${AB_DTYPES:-bfloat16 float32} 2>&1 \
      | grep -vE "^[WI]0000|^WARNING" > "$out/${AB_TAG:-stage}_$i-$v.md"
    echo "rc=$? ($v)"
  done
  python3 - "$out/${AB_TAG:-stage}"_*.md <<'PY' | tee "$out/${AB_TAG:-stage}_ab.md"
import sys
def rows(path):
    out = {}
    for line in open(path):
        f = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(f) > 5 and f[3].isdigit():
            out[tuple(f[:4])] = float(f[5])
    return out
runs = [(p.split("/")[-1][:-3], rows(p)) for p in sorted(sys.argv[1:])]
base = runs[0][1]
print("| op | dir | dtype | C | " + " | ".join(f"{n}: ms" for n, _ in runs) + " | "
      + " | ".join(f"{n} / {runs[0][0]}" for n, _ in runs[1:]) + " |")  # ms over the first one's
print("|---" * (4 + 2 * len(runs) - 1) + "|")
for k, ms in base.items():
    t = [r.get(k) for _, r in runs]  # (op, dir, dtype, C) -> ms
    if None in t:
        continue
    print(f"| {' | '.join(k)} | " + " | ".join(f"{v:.4f}" for v in t) + " | "
          + " | ".join(f"{v / ms:.3f}" for v in t[1:]) + " |")
PY
}

stage_san() { ab_sanitize "v33${AB_TAG:+-$AB_TAG}" kns=norm_bwd 280 ${SAN_OPS:-layer_norm rms_norm}; }

stage_verify() {
  stage_btest &
  stage_san
  stage_big
}

stage_big() { ab_big_tests "big_layer_norm_backward or big_norm_backward_teams"; }

stage_ptest() {
  ab_gpu_tests ptest 300 "paired_blocks or backward_deterministic or backward_partials or (test_norms and grad)" 280
}

stage_nbench() { ab_dbench nbench-device device --ops layer_norm rms_norm --dirs bwd fwd+bwd --parts sweep; }

ab_init "$@"
ab_run v33
