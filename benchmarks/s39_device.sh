#!/usr/bin/env bash
# The thirty-ninth session's device call, from the repository root: `bash benchmarks/s39_device.sh`.
#   H200: the measurements issues 4 and 5 wait for (benchmarks/pending_h200.sh, whose tests are the norms' GPU tests),
#         then the forward-mode GPU tests and the > 2^31-element jvp tests;
#   another card: the build, the norms' and forward mode's GPU tests (the row kernels' for_slot_rows / clamp_var
#         refactor), the > 2^31-element jvp tests and compute-sanitizer memcheck over the forward-mode kernels.
. benchmarks/session_prelude.sh s39
case "$g" in
  *H200*) OUT="$o" PENDING_END=370 bash benchmarks/pending_h200.sh ;;
  *) build_library
     timeout 200 python3 -P -m pytest -q -n 14 -p no:cacheprovider -k "gpu and not slow" tests/test_norms.py \
       > "$o/tests_norms.log" 2>&1; echo "norms tests rc=$? at $((SECONDS - t0)) s"; tail -2 "$o/tests_norms.log"
     grep -E "^FAILED" "$o/tests_norms.log" | head ;;
esac
timeout 90 python3 -P -m pytest -q -n 8 -p no:cacheprovider -k gpu tests/test_forward_mode.py > "$o/tests_jvp.log" 2>&1
echo "forward-mode tests rc=$? at $((SECONDS - t0)) s"; tail -2 "$o/tests_jvp.log"
grep -E "^FAILED" "$o/tests_jvp.log" | head
timeout 120 python3 -P -m pytest -q -p no:cacheprovider -k big_jvp tests/test_gpu.py > "$o/tests_big_jvp.log" 2>&1
echo "big jvp tests rc=$? at $((SECONDS - t0)) s"; tail -2 "$o/tests_big_jvp.log"
case "$g" in
  *H200*) ;;
  *) timeout 70 compute-sanitizer --tool memcheck python3 benchmarks/sanitize_jvp.py > "$o/memcheck_jvp.log" 2>&1
     echo "memcheck rc=$? at $((SECONDS - t0)) s"; grep -E "ERROR SUMMARY" "$o/memcheck_jvp.log" | head -3 ;;
esac
echo "end at $((SECONDS - t0)) s"
