#!/usr/bin/env bash
# The v31 device calls: the norms' 16-bit backward on 256-thread teams (K = 4 / 6 packs, partials in shared memory)
# and each team at its own barrier (cpp/norm_bwd_lean.cuh; JAX_MEMOPS_NORM_BWD=v30 the kernels before).
#   btest    the norm backward versions' GPU tests ("", v30, v18: every class, NaN-poured outputs, determinism).
#   ab       benchmarks/partials_ab.py twice, one process per kernel version (the default, then v30), the same
#            workspace variants (AB_VARIANTS; default "default teams=32": the rule, and 264 partial rows wherever
#            rows * itemsize / 32 >= 248), widths (AB_COLS) and dtypes (AB_DTYPES); then the ratio of the two
#            processes case by case (files tagged AB_TAG). The first call's variants were "v30 teams=32", v30
#            then a rule this tree does not keep (16-bit rows paired up to C = 12288 by default).
#   verify   the norm backward versions' tests (all) beside compute-sanitizer memcheck / racecheck over every norm
#            kernel.
#   big      the > 2^31-element LayerNorm and RMSNorm (256-thread teams) backward.
#   ptest    the norms' backward tests on the GPU (paired blocks, determinism, partials, tests/test_norms.py grads).
#   nbench   the bench's LayerNorm and RMSNorm backward and forward + backward, f32 and bf16, device timing.
set -uo pipefail
source "$(dirname "$0")/ab_lib.sh"

stage_build() { ab_build || exit 1; }

stage_btest() {
  local t=tests/test_gpu.py::test_norm_backward_versions
  XLA_PYTHON_CLIENT_PREALLOCATE=false timeout 200 python3 -P -m pytest -q -rfE -n 3 --timeout 190 "$t[]" "$t[v30]" \
    "$t[v18]" > "$out/btest.log" 2>&1
  tail -n 1 "$out/btest.log"
}

stage_ab() {
  local v tag=${AB_TAG:-}
  for v in v31 v30; do
    # shellcheck disable=SC2086
    JAX_MEMOPS_NORM_BWD=$([ $v = v30 ] && echo v30) timeout 280 python3 -P benchmarks/partials_ab.py \
      --variants ${AB_VARIANTS:-default teams=32} --cols ${AB_COLS:-1024 2048 4096 5120 6144 8192 12288} \
      --dtypes ${AB_DTYPES:-float32 bfloat16} 2>&1 | grep -vE "^[WI]0000|^WARNING" > "$out/partials_ab_kernel_$v$tag.md"
    echo "rc=$? ($v)"
  done
  python3 - "$out/partials_ab_kernel_v31$tag.md" "$out/partials_ab_kernel_v30$tag.md" <<'PY' | tee "$out/kernel_ab$tag.md"
import sys
def rows(path):
    out = {}
    for line in open(path):
        f = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(f) > 6 and f[3].isdigit():
            out[tuple(f[:4])] = f
    return out
new, old = rows(sys.argv[1]), rows(sys.argv[2])
nv = (len(next(iter(new.values()))) - 6) // 2 + 1
print("| op | dir | dtype | C | P | " + " | ".join(f"v31 / v30 (variant {i})" for i in range(nv))
      + (" | v31: variant 1 / variant 0 |" if nv > 1 else " |"))
print("|---" * (5 + nv + (nv > 1)) + "|")
for k, f in new.items():
    o = old.get(k)
    if o is None:
        continue
    ms_new = [float(t) for t in f[5:5 + nv]]
    ms_old = [float(t) for t in o[5:5 + nv]]
    print(f"| {' | '.join(k)} | {f[4]} | " + " | ".join(f"{b / a:.3f}" for a, b in zip(ms_new, ms_old))
          + (f" | {ms_new[0] / ms_new[1]:.3f} |" if nv > 1 else " |"))
PY
}

stage_verify() {
  XLA_PYTHON_CLIENT_PREALLOCATE=false timeout 300 python3 -P -m pytest -q -rfE -n 5 --timeout 280 \
    -k "norm_backward_versions" tests/test_gpu.py > "$out/versions.log" 2>&1 &
  ab_norm_sanitize v31 kns=_kernel 280
  wait
  tail -n 1 "$out/versions.log"
}

stage_big() { ab_big_tests "big_layer_norm_backward or big_norm_backward_teams"; }

stage_ptest() { ab_norm_ptest; }

stage_nbench() { ab_norm_nbench; }

ab_init "$@"
ab_run v31
