#!/usr/bin/env bash
# The forty-second session's device call, from the repository root: `bash benchmarks/s42_device.sh`.
#   H200: the measurements issues 4 and 5 wait for (benchmarks/pending_h200.sh), then the bench's softmax forward at
#         the issue-4 cells that missed in the thirty-first session (C = 128, 50257, 131072; f32, bf16), device
#         timing; then the checks below;
#   another card: the build, the checks below, and compute-sanitizer memcheck and racecheck over the forward-mode
#         kernels (benchmarks/sanitize_jvp.py) under the norms' jvp plan v3, whose two rows per CTA no sanitizer has
#         seen, beside gpu_check.sh's sanitize and race stages over the whole library (logs in $OUT/gpu-out.tgz).
#   S42_SHORT=1 (little device time left): on an H200 the build and the checks before the bench, no pending_h200.sh.
#   Checks, either card: the GELU derivatives' tails test on the GPU (their jax.numpy sigmoid form), the forward-mode
#         GELU tests (among them x = +-inf with the parameters held fixed: the forty-second session's absent tangent),
#         and the sharding tests under the machine's jax (the forty-first session's cotangent types and decoding).
. benchmarks/session_prelude.sh s42
checks() {
  timeout 60 python3 -P -m pytest -q -p no:cacheprovider -k tails tests/test_gelu.py > "$o/tests_tails.log" 2>&1
  echo "GELU tails tests rc=$? at $((SECONDS - t0)) s"; tail -1 "$o/tests_tails.log"
  timeout 90 python3 -P -m pytest -q -n 8 -p no:cacheprovider -k "gpu and gelu" tests/test_forward_mode.py \
    > "$o/tests_jvp.log" 2>&1
  echo "GELU forward-mode tests rc=$? at $((SECONDS - t0)) s"; tail -1 "$o/tests_jvp.log"
  timeout 120 python3 -P -m pytest -q -n 8 -p no:cacheprovider tests/test_sharding.py > "$o/tests_sharding.log" 2>&1
  echo "sharding tests rc=$? at $((SECONDS - t0)) s (jax $(python3 -c 'import jax; print(jax.__version__)'))"
  tail -1 "$o/tests_sharding.log"
}
case "$g" in
  *H200*)
    if [ "${S42_SHORT:-0}" = 1 ]; then  # under 10 min of device time left: the build, the checks, the bench cells
      build_library; checks
    else
      OUT="$o" PENDING_END=200 bash benchmarks/pending_h200.sh
    fi
    timeout 120 jax-memops bench --ops softmax --dirs fwd --dtypes float32 bfloat16 --cols 128 50257 131072 \
      --timing device --reps 15 --parts sweep --out /tmp/bench > "$o/bench.log" 2>&1
    echo "bench rc=$? at $((SECONDS - t0)) s"; grep -E "^softmax" "$o/bench.log"
    [ "${S42_SHORT:-0}" = 1 ] || checks ;;
  *)
    build_library
    checks
    for tool in memcheck racecheck; do
      ( XLA_FLAGS=--xla_gpu_enable_command_buffer= timeout 200 compute-sanitizer --tool $tool \
          --kernel-name kns=_kernel --error-exitcode 3 python3 benchmarks/sanitize_jvp.py > "$o/${tool}_jvp.log" 2>&1
        echo "$tool over sanitize_jvp.py rc=$? at $((SECONDS - t0)) s" ) &
    done
    T_SAN=150 T_RACE=110 bash benchmarks/gpu_check.sh sanitize race
    wait
    for tool in memcheck racecheck; do
      grep -E "SUMMARY|^failures" "$o/${tool}_jvp.log"; grep -c "^ok " "$o/${tool}_jvp.log"
    done ;;
esac
echo "end at $((SECONDS - t0)) s"
