#!/usr/bin/env bash
# The v32 device calls for the norms: the 16-bit backward rows of K = 3 packs per thread one row ahead with the scale
# held, LayerNorm's partials in shared memory (cpp/norms.cu norm_bwd_lean; JAX_MEMOPS_NORM_BWD=v31 the kernels
# before). (The softmax experiments of v32 ran benchmarks/softmax_long_ab.cu on branch v32-ring, one call each.)
# Options the calls' trees had and this one does not: =v32-hold (the first call: RMSNorm's scale held, its default
# then the prefetch alone; tables benchmarks/h200/v32/rms_k3_*), =v32-ln3 / =v32-ln3-lean (the second: LayerNorm's
# K = 3 rows one row ahead, partials by quads, the scale held or not, RMSNorm's as now; tables k3_*).
#   btest    the norm backward versions' GPU tests for BT_VERSIONS (default "" and v31; every class, NaN-poured
#            outputs, bitwise determinism; C = 8200, 10000, 12288 among them).
#   ab       benchmarks/partials_ab.py once per kernel version, one process each (AB_VERSIONS, default "v32 v31 v32":
#            the last the processes' A/A), AB_OPS (default rms_norm) backward and forward + backward at AB_COLS
#            (default 8200 10000 12288) in AB_DTYPES (default bfloat16 float16); then each version's ms against the
#            first one's, case by case (files tagged AB_TAG, default rms_k3).
#            The second call: AB_OPS="rms_norm layer_norm" AB_COLS="768 1536 3072 6144 12288" AB_DTYPES=bfloat16
#            AB_VERSIONS="v32 v31 v32-ln3 v32-ln3-lean v32" AB_TAG=k3 (RMSNorm's change at every K = 3 width;
#            =v32-ln3 / =v32-ln3-lean: LayerNorm's K = 3 rows one row ahead, partials in shared memory by quads, the
#            scale held or not).
#   san      compute-sanitizer memcheck and racecheck over the backward kernels of SAN_OPS (default rms_norm;
#            sanitize.py --only), under the JAX_MEMOPS_NORM_BWD the call sets.
#   big      the > 2^31-element RMSNorm backward tests.
#   nbench   the bench's RMSNorm and LayerNorm backward and forward + backward, f32 and bf16, device timing.
set -uo pipefail
source "$(dirname "$0")/ab_lib.sh"

stage_build() { ab_build || exit 1; }

stage_btest() {
  local t=tests/test_gpu.py::test_norm_backward_versions v ids=("$t[]" "$t[v31]")
  if [ -n "${BT_VERSIONS+x}" ]; then
    ids=()
    for v in $BT_VERSIONS; do ids+=("$t[$v]"); done
  fi
  XLA_PYTHON_CLIENT_PREALLOCATE=false timeout 250 python3 -P -m pytest -q -rfE -n 2 --timeout 240 "${ids[@]}" \
    > "$out/btest${AB_TAG:+-$AB_TAG}.log" 2>&1
  tail -n 1 "$out/btest${AB_TAG:+-$AB_TAG}.log"
}

stage_ab() {
  local v i=0
  for v in ${AB_VERSIONS:-v32 v31 v32}; do
    i=$((i + 1))
    # shellcheck disable=SC2086
    JAX_MEMOPS_NORM_BWD=$v timeout 200 python3 -P benchmarks/partials_ab.py --variants default default \
      --ops ${AB_OPS:-rms_norm} --cols ${AB_COLS:-8200 10000 12288} --dtypes ${AB_DTYPES:-bfloat16 float16} 2>&1 \
      | grep -vE "^[WI]0000|^WARNING" > "$out/${AB_TAG:-rms_k3}_$i-$v.md"
    echo "rc=$? ($v)"
  done
  python3 - "$out/${AB_TAG:-rms_k3}"_*.md <<'PY' | tee "$out/${AB_TAG:-rms_k3}_ab.md"
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

stage_san() { ab_sanitize "v32${AB_TAG:+-$AB_TAG}" kns=norm_bwd 280 ${SAN_OPS:-rms_norm}; }

stage_big() { ab_big_tests "big_norm_backward_teams and rms"; }

stage_nbench() { ab_dbench nbench-device device --ops layer_norm rms_norm --dirs bwd fwd+bwd --parts sweep; }

ab_init "$@"
ab_run v32
