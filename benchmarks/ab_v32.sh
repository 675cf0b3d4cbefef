#!/usr/bin/env bash
# The v32 device calls for the norms: RMSNorm's 16-bit rows of K = 3 packs per thread (C = 8200..12288 in bf16,
# one 512-thread team per SM) one row ahead with the scale held (cpp/norms.cu norm_bwd_lean; JAX_MEMOPS_NORM_BWD=v31
# the kernels before). (The softmax experiments of v32 ran benchmarks/softmax_long_ab.cu on branch v32-ring, one call
# each.) The first call's tree also had =v32-hold (the scale held: now the default; its default then the prefetch
# alone): its tables in benchmarks/h200/v32/rms_k3_*.
#   btest    the norm backward versions' GPU tests for "" and v31 (every class, NaN-poured outputs, bitwise
#            determinism; C = 8200, 10000, 12288 among them).
#   ab       benchmarks/partials_ab.py once per kernel version, one process each (AB_VERSIONS, default "v32 v31 v32":
#            the last the processes' A/A), RMSNorm backward and forward + backward at AB_COLS (default 8200 10000
#            12288), bf16 and f16; then each version's ms against the first one's, case by case.
#   san      compute-sanitizer memcheck and racecheck over the RMSNorm kernels (sanitize.py --only rms_norm).
#   big      the > 2^31-element RMSNorm backward tests.
#   nbench   the bench's RMSNorm and LayerNorm backward and forward + backward, f32 and bf16, device timing.
set -uo pipefail
source "$(dirname "$0")/ab_lib.sh"

stage_build() { ab_build || exit 1; }

stage_btest() {
  local t=tests/test_gpu.py::test_norm_backward_versions
  XLA_PYTHON_CLIENT_PREALLOCATE=false timeout 250 python3 -P -m pytest -q -rfE -n 2 --timeout 240 "$t[]" "$t[v31]" \
    > "$out/btest.log" 2>&1
  tail -n 1 "$out/btest.log"
}

stage_ab() {
  local v i=0
  for v in ${AB_VERSIONS:-v32 v31 v32}; do
    i=$((i + 1))
    JAX_MEMOPS_NORM_BWD=$v timeout 200 python3 -P benchmarks/partials_ab.py --variants default default --ops rms_norm \
      --cols ${AB_COLS:-8200 10000 12288} --dtypes bfloat16 float16 2>&1 | grep -vE "^[WI]0000|^WARNING" \
      > "$out/rms_k3_$i-$v.md"
    echo "rc=$? ($v)"
  done
  python3 - "$out"/rms_k3_*.md <<'PY' | tee "$out/rms_k3_ab.md"
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
      + " | ".join(f"{runs[0][0]} / {n}" for n, _ in runs[1:]) + " |")
print("|---" * (4 + 2 * len(runs) - 1) + "|")
for k, ms in base.items():
    t = [r.get(k) for _, r in runs]
    if None in t:
        continue
    print(f"| {' | '.join(k)} | " + " | ".join(f"{v:.4f}" for v in t) + " | "
          + " | ".join(f"{v / ms:.3f}" for v in t[1:]) + " |")
PY
}

stage_san() { ab_sanitize v32 kns=norm_bwd 280 rms_norm; }

stage_big() { ab_big_tests "big_rms_norm_backward"; }

stage_nbench() { ab_dbench nbench-device device --ops layer_norm rms_norm --dirs bwd fwd+bwd --parts sweep; }

ab_init "$@"
ab_run v32
