#!/usr/bin/env bash
# The norms' CUDA jvp launch plans, v1 (the default) against v2 (two rows of <= 256 threads per SM; norm_jvp.cu),
# from the repository root on any GPU: `bash benchmarks/s39_jvp_plan.sh`. Build; the forward-mode GPU tests and the
# > 2^31-element jvp tests under v2; the bench's jvp rows of LayerNorm and RMSNorm at 4096..16384 columns, f32 and bf16,
# v1 then v2, a second round while time is left; then the norms' GPU tests (launch_rows' new overload).
. benchmarks/session_prelude.sh s39p
build_library
JAX_MEMOPS_NORM_JVP=v2 timeout 80 python3 -P -m pytest -q -n 8 -p no:cacheprovider -k gpu \
  tests/test_forward_mode.py \
  > "$o/tests_jvp_v2.log" 2>&1; echo "forward-mode tests (v2) rc=$? at $((SECONDS - t0)) s"; tail -1 "$o/tests_jvp_v2.log"
JAX_MEMOPS_NORM_JVP=v2 timeout 80 python3 -P -m pytest -q -p no:cacheprovider -k big_jvp tests/test_gpu.py \
  > "$o/tests_big_v2.log" 2>&1; echo "big jvp tests (v2) rc=$? at $((SECONDS - t0)) s"; tail -1 "$o/tests_big_v2.log"
bench() {  # $1: plan, $2: round
  JAX_MEMOPS_NORM_JVP=$1 timeout 150 jax-memops bench --ops layer_norm rms_norm --dirs jvp --dtypes float32 bfloat16 \
    --cols 4096 8192 12288 16384 --parts sweep --out "/tmp/bench_$1_$2" > "$o/bench_$1_$2.log" 2>&1
  echo "bench $1 round $2 rc=$? at $((SECONDS - t0)) s"
}
bench v1 1; bench v2 1
[ $((SECONDS - t0)) -lt 380 ] && { bench v1 2; bench v2 2; }
timeout 60 python3 -P -m pytest -q -n 14 -p no:cacheprovider -k "gpu and not slow" tests/test_norms.py \
  > "$o/tests_norms.log" 2>&1; echo "norms tests rc=$? at $((SECONDS - t0)) s"; tail -1 "$o/tests_norms.log"
# op dtype shape: ours ms, XLA ms, speedup, % of copy
for f in "$o"/bench_v*.log; do
  echo "== $(basename "$f" .log)"
  awk '/^(layer_norm|rms_norm) +jvp/{printf "%-10s %-8s %-10s %s %s %s %s%%\n", $1, $3, $4, $5, $6, $7, $9}' "$f"
done
echo "end at $((SECONDS - t0)) s"
