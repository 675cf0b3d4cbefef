#!/usr/bin/env bash
# The thirty-eighth session's last device call, lean (its device time nearly spent): build, the GPU forward-mode tests,
# compute-sanitizer memcheck over benchmarks/sanitize_jvp.py, and the bench's jvp rows of the norms and GELU.
. benchmarks/session_prelude.sh s38
build_library
timeout 100 python3 -P -m pytest -q -n 8 -p no:cacheprovider -k gpu tests/test_forward_mode.py > "$o/tests_jvp.log" 2>&1
echo "forward-mode tests rc=$? at $((SECONDS - t0)) s"; tail -3 "$o/tests_jvp.log"
grep -E "^FAILED" "$o/tests_jvp.log" | head
timeout 70 compute-sanitizer --tool memcheck python3 benchmarks/sanitize_jvp.py > "$o/memcheck_jvp.log" 2>&1
echo "memcheck rc=$? at $((SECONDS - t0)) s"; grep -E "ERROR SUMMARY|failures|BAD" "$o/memcheck_jvp.log" | head -5
timeout 90 jax-memops bench --ops layer_norm rms_norm gelu --dirs jvp --dtypes float32 bfloat16 --cols 1024 8192 \
  --parts sweep --out "$o/bench_jvp" > "$o/bench_jvp.log" 2>&1; echo "bench jvp rc=$?"
grep -hE "^(gelu|layer_norm|rms_norm) " "$o/bench_jvp.log" | cut -c1-150
echo "end at $((SECONDS - t0)) s"
