#!/usr/bin/env bash
# The thirty-eighth session's device call: on an H200, the pending measurements (pending_h200.sh, bounded); on any GPU
# then forward mode's one-pass kernels (gelu_jvp; norm_jvp.cu, the second call): the forward-mode, GELU and norms' GPU
# tests, compute-sanitizer memcheck and racecheck over benchmarks/sanitize_jvp.py (not on the H200: its time goes to
# the pending work), and the bench's jvp rows of GELU and the norms beside GELU's forward.
. benchmarks/session_prelude.sh s38
h200=0; case "$g" in *H200*) h200=1 ;; esac
if [ $h200 = 1 ]; then
  PENDING_END=${PENDING_END:-240} bash benchmarks/pending_h200.sh > "$o/pending.log" 2>&1; tail -25 "$o/pending.log"
else
  build_library " error|warning"
fi
timeout 150 python3 -P -m pytest -q -n 8 -p no:cacheprovider -k "gpu" tests/test_forward_mode.py tests/test_gelu.py \
  tests/test_transforms.py \
  > "$o/tests_jvp.log" 2>&1; echo "jvp tests rc=$? at $((SECONDS - t0)) s"; tail -3 "$o/tests_jvp.log"
if [ $h200 = 0 ]; then
  timeout 130 compute-sanitizer --tool memcheck python3 benchmarks/sanitize_jvp.py > "$o/memcheck_jvp.log" 2>&1
  echo "memcheck rc=$? at $((SECONDS - t0)) s"; grep -E "ERROR SUMMARY|failures|BAD" "$o/memcheck_jvp.log" | head -5
  timeout 100 compute-sanitizer --tool racecheck python3 benchmarks/sanitize_jvp.py > "$o/racecheck_jvp.log" 2>&1
  echo "racecheck rc=$? at $((SECONDS - t0)) s"
  grep -E "RACECHECK SUMMARY|failures|BAD" "$o/racecheck_jvp.log" | head -5
fi
timeout 150 jax-memops bench --ops gelu layer_norm rms_norm --dirs jvp --dtypes float32 bfloat16 --cols 768 4096 12288 \
  --parts sweep --out "$o/bench_jvp" > "$o/bench_jvp.log" 2>&1; echo "bench jvp rc=$?"
timeout 60 jax-memops bench --ops gelu --dirs fwd --dtypes float32 bfloat16 --cols 768 4096 --parts sweep \
  --out "$o/bench_fwd" > "$o/bench_fwd.log" 2>&1; echo "bench fwd rc=$?"
grep -hE "^(gelu|layer_norm|rms_norm) " "$o/bench_jvp.log" "$o/bench_fwd.log" | cut -c1-150
echo "end at $((SECONDS - t0)) s"
