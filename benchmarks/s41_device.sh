#!/usr/bin/env bash
# The forty-first session's device call, from the repository root: `bash benchmarks/s41_device.sh`.
#   H200: the measurements issues 4 and 5 wait for (benchmarks/pending_h200.sh), then the bench's softmax forward at
#         the issue-4 cells that missed in the thirty-first session (C = 128, 50257, 131072; f32, bf16), device
#         timing, and the GELU derivatives' tails test on the GPU;
#   another card: the build; the GELU derivatives' tails test on the GPU (its jax.numpy sigmoid form, b2a2cd9);
#         compute-sanitizer memcheck and racecheck over the forward-mode kernels
#         (benchmarks/sanitize_jvp.py) under the norms' jvp plan v3, whose two rows per CTA no sanitizer has seen,
#         beside gpu_check.sh's sanitize and race stages over the whole library (logs in $OUT/gpu-out.tgz).
. benchmarks/session_prelude.sh s41
case "$g" in
  *H200*)
    OUT="$o" PENDING_END=330 bash benchmarks/pending_h200.sh
    timeout 120 jax-memops bench --ops softmax --dirs fwd --dtypes float32 bfloat16 --cols 128 50257 131072 \
      --timing device --reps 15 --parts sweep --out /tmp/bench > "$o/bench.log" 2>&1
    echo "bench rc=$? at $((SECONDS - t0)) s"; grep -E "^softmax" "$o/bench.log"
    timeout 60 python3 -P -m pytest -q -p no:cacheprovider -k tails tests/test_gelu.py > "$o/tests_tails.log" 2>&1
    echo "GELU tails tests rc=$? at $((SECONDS - t0)) s"; tail -1 "$o/tests_tails.log" ;;
  *)
    build_library
    timeout 60 python3 -P -m pytest -q -p no:cacheprovider -k tails tests/test_gelu.py > "$o/tests_tails.log" 2>&1
    echo "GELU tails tests rc=$? at $((SECONDS - t0)) s"; tail -1 "$o/tests_tails.log"
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
