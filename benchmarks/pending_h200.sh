#!/usr/bin/env bash
# The H200 measurements issues 4 and 5 still wait for (RESULTS.md, "The thirty-fourth session"), as one device call
# from the repository root: `bash benchmarks/pending_h200.sh` (~5 min warm, ~7 with the start). On another card it
# stops at once (PENDING_ANY_GPU=1: runs step 2, an A/B's direction, not the figure, and then the slow GPU
# tests but the > 2^31 ones; the thirty-fifth session's H100 did, benchmarks/h100/s35/).
#   1. the long rows' sizes: the default against [kr] at 2^26 and 2^28 elements, 50 µs spin (issue 4: per launch or
#      per byte, on the H200);
#   2. norm_fwd_ab pairs, whose [r3] columns are bf16 LayerNorm with three rows per block (issue 5: 12288 at 89%);
#   3. in the time left, the GPU suite's norms file (tests run with -P: the source tree has no built extension).
. benchmarks/session_prelude.sh pending
h200=0; case "$g" in *H200*) h200=1 ;; esac
[ $h200 = 0 ] && [ "${PENDING_ANY_GPU:-0}" != 1 ] && { echo "not an H200: nothing run"; exit 0; }
inc=$(python3 -c "import jax.ffi; print(jax.ffi.include_dir())")
(build_library) &
[ $h200 = 1 ] && (OUT=/tmp/h bash benchmarks/ab_sizes.sh harness > /tmp/harness.log 2>&1; echo "harness rc=$?") &
(nvcc -std=c++17 -O3 -arch=sm_90 --expt-relaxed-constexpr -I"$inc" -Icpp benchmarks/norm_fwd_ab.cu \
  -o /tmp/norm_fwd_ab > /tmp/nb.log 2>&1; echo "norm harness rc=$?") &
wait
if [ $h200 = 1 ]; then
  SIZES_LOG2="26 28" SIZES_SPIN=50 SIZES_VARIANTS="[kr]" SIZES_CASES="f32:50257 f32:131072 bf16:100000 bf16:131072" \
    OUT=/tmp/s bash benchmarks/ab_sizes.sh sizes
  cp /tmp/s/*.tgz "$o"/ 2>/dev/null
fi
timeout 150 /tmp/norm_fwd_ab pairs > "$o/pairs.md" 2>&1; echo "pairs rc=$? at $((SECONDS - t0)) s"
# C | v45 | A/A | none | v48's default (R=2, NP=3, 64) | [r3] NP=6 at 128 | [r3] NP=3 at 80
awk -F'|' '/^\| [0-9]/{print $2"|"$4"|"$5"|"$6"| v48"$9"| r3-6-128"$14"| r3-3-80"$15}' "$o/pairs.md"
left=$((${PENDING_END:-560} - (SECONDS - t0)))  # PENDING_END: seconds from the start at which the tests stop
sel=(-k "gpu and slow and not big" tests/)
[ $h200 = 1 ] && sel=(-k "gpu and not slow" tests/test_norms.py)
[ $left -gt 60 ] && timeout -s INT $left python3 -P -m pytest -q -n 14 -p no:cacheprovider "${sel[@]}" \
  > "$o/tests.log" 2>&1; tail -2 "$o/tests.log" 2>/dev/null
echo "end at $((SECONDS - t0)) s"
