#!/usr/bin/env bash
# v89's A/B on a many-core host (RESULTS.md, "The thirty-fifth session"): the CPU handlers as they are against
# benchmarks/cpu/v89/v89-chained-wakes.patch (the caller wakes one helper, each helper two more), both built CPU-only,
# timed by `cpu_pool_ab.py --gap` with 50 µs (a sleeping pool) and 0 µs between calls, ROUNDS (2) rounds alternating.
# From the repository root: `bash benchmarks/cpu_pool_many.sh` (~6 min on 16 cores); one log, $OUT/many.txt.
set -u
o=${OUT:-/tmp/many}; mkdir -p "$o"; t0=$SECONDS; exec > >(tee "$o/many.txt") 2>&1
export JAX_PLATFORMS=cpu PYTHONUNBUFFERED=1 CMAKE_BUILD_PARALLEL_LEVEL=8 JAX_MEMOPS_CUDA=OFF
echo "CPUs: $(nproc)"
rm -rf /tmp/v89src && cp -r . /tmp/v89src
(cd /tmp/v89src && patch -s -p1 < benchmarks/cpu/v89/v89-chained-wakes.patch)
(python3 -m pip install -q --no-build-isolation --no-deps --target /tmp/cpu_old . > /tmp/build_old.log 2>&1
 echo "old build rc=$?") & b1=$!
(cd /tmp/v89src && python3 -m pip install -q --no-build-isolation --no-deps --target /tmp/cpu_new . \
  > /tmp/build_new.log 2>&1; echo "new build rc=$?") & b2=$!
wait $b1 $b2  # not a bare wait: it would wait for the tee too
echo "built at $((SECONDS - t0)) s"
for r in $(seq "${ROUNDS:-2}"); do for v in old new; do for g in 50 0; do
  echo "$v r$r gap $g at $((SECONDS - t0)) s"
  PYTHONPATH=/tmp/cpu_$v python3 benchmarks/cpu_pool_ab.py --gap $g 2>/dev/null
done; done; done
