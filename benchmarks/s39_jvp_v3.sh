#!/usr/bin/env bash
# The norms' CUDA jvp plan v3 (the default: v2's two rows per SM up to 8 packs a thread, v1 beyond; norm_jvp.cu) checked
# on any GPU, from the repository root: `bash benchmarks/s39_jvp_v3.sh`. Build; the forward-mode GPU tests and the
# > 2^31-element jvp tests under the default; the bench's jvp rows at 8192..16384 columns, v1 then the default; the
# plans' switch tests while time is left.
. benchmarks/session_prelude.sh s39v3
build_library
timeout 80 python3 -P -m pytest -q -n 8 -p no:cacheprovider -k gpu tests/test_forward_mode.py > "$o/tests_jvp.log" 2>&1
echo "forward-mode tests rc=$? at $((SECONDS - t0)) s"; tail -1 "$o/tests_jvp.log"
timeout 80 python3 -P -m pytest -q -p no:cacheprovider -k big_jvp tests/test_gpu.py > "$o/tests_big.log" 2>&1
echo "big jvp tests rc=$? at $((SECONDS - t0)) s"; tail -1 "$o/tests_big.log"
bench() {  # $1: plan (JAX_MEMOPS_NORM_JVP; "default" sets it empty, which names no plan), $2: round
  JAX_MEMOPS_NORM_JVP=$([ "$1" = default ] || echo "$1") timeout 120 jax-memops bench \
    --ops layer_norm rms_norm --dirs jvp --dtypes float32 bfloat16 --cols 8192 12288 16384 --parts sweep \
    --out "/tmp/bench_$1_$2" > "$o/bench_$1_$2.log" 2>&1
  echo "bench $1 round $2 rc=$? at $((SECONDS - t0)) s"
}
bench v1 1; bench default 1
[ $((SECONDS - t0)) -lt 280 ] && { timeout 100 python3 -P -m pytest -q -n 3 -p no:cacheprovider -k jvp_plans \
  tests/test_norm_switches.py > "$o/tests_plans.log" 2>&1; echo "plan tests rc=$? at $((SECONDS - t0)) s"
  tail -1 "$o/tests_plans.log"; }
# op dtype shape: ours ms, XLA ms, speedup, % of copy
for f in "$o"/bench_*.log; do
  echo "== $(basename "$f" .log)"
  awk '/^(layer_norm|rms_norm) +jvp/{printf "%-10s %-8s %-10s %s %s %s %s%%\n", $1, $3, $4, $5, $6, $7, $9}' "$f"
done
echo "end at $((SECONDS - t0)) s"
