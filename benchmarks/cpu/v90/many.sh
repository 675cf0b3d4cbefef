#!/usr/bin/env bash
# v90 on a many-core host (RESULTS.md, "The thirty-sixth session"): the CPU handlers as they are (new) against the tree
# with benchmarks/cpu/v90/v90.patch reversed (old), both built CPU-only; fusion_ab.py and dx_ab.py, ROUNDS (1) rounds
# alternating; then the new build's thread-count and column-tile tests. From the repository root:
# `bash benchmarks/cpu/v90/many.sh` (~5 min on 16 cores); one log, $OUT/many.txt.
set -u
o=${OUT:-/tmp/many}; mkdir -p "$o"; t0=$SECONDS; exec > >(tee "$o/many.txt") 2>&1
export JAX_PLATFORMS=cpu PYTHONUNBUFFERED=1 CMAKE_BUILD_PARALLEL_LEVEL=8 JAX_MEMOPS_CUDA=OFF
echo "CPUs: $(nproc)"
rm -rf /tmp/v90old && cp -r . /tmp/v90old
(cd /tmp/v90old && patch -s -R -p1 < benchmarks/cpu/v90/v90.patch)
(python3 -m pip install -q --no-build-isolation --no-deps --target /tmp/cpu_new . > /tmp/build_new.log 2>&1
 echo "new build rc=$?") & b1=$!
(cd /tmp/v90old && python3 -m pip install -q --no-build-isolation --no-deps --target /tmp/cpu_old . \
  > /tmp/build_old.log 2>&1; echo "old build rc=$?") & b2=$!
wait $b1 $b2  # not a bare wait: it would wait for the tee too
echo "built at $((SECONDS - t0)) s"
for r in $(seq "${ROUNDS:-1}"); do for v in old new; do
  echo "$v r$r fusion at $((SECONDS - t0)) s"
  PYTHONPATH=/tmp/cpu_$v python3 benchmarks/cpu/v90/fusion_ab.py 2>/dev/null
  echo "$v r$r dx at $((SECONDS - t0)) s"
  PYTHONPATH=/tmp/cpu_$v python3 benchmarks/cpu/v90/dx_ab.py 2>/dev/null
done; done
echo "tests at $((SECONDS - t0)) s"
PYTHONPATH=/tmp/cpu_new python3 -P -m pytest -q -p no:cacheprovider -n 8 tests/test_cpu_threads.py tests/test_gelu.py \
  tests/test_cpu_buffers.py 2>&1 | tail -3
echo "end at $((SECONDS - t0)) s"
