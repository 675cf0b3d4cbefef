#!/usr/bin/env bash
# v91 on a many-core host (RESULTS.md, "The CPU handlers, v91"): the tree built CPU-only (new) against the tree with
# benchmarks/cpu/v91/v91.patch reversed (old); softmax_ab.py, ROUNDS (1) rounds alternating; then the new build's
# thread-count test and long-row softmax tests. From the repository root: `bash benchmarks/cpu/v91/many.sh`
# (~3 min on 16 cores); one log, $OUT/many.txt.
set -u
o=${OUT:-/tmp/many}; mkdir -p "$o"; t0=$SECONDS; exec > >(tee "$o/many.txt") 2>&1
export JAX_PLATFORMS=cpu PYTHONUNBUFFERED=1 CMAKE_BUILD_PARALLEL_LEVEL=8 JAX_MEMOPS_CUDA=OFF
echo "CPUs: $(nproc)"
rm -rf /tmp/v91old && cp -r . /tmp/v91old
(cd /tmp/v91old && patch -s -R -p1 < benchmarks/cpu/v91/v91.patch)
(python3 -m pip install -q --no-build-isolation --no-deps --target /tmp/cpu_new . > /tmp/build_new.log 2>&1
 echo "new build rc=$?") & b1=$!
(cd /tmp/v91old && python3 -m pip install -q --no-build-isolation --no-deps --target /tmp/cpu_old . \
  > /tmp/build_old.log 2>&1; echo "old build rc=$?") & b2=$!
wait $b1 $b2  # not a bare wait: it would wait for the tee too
echo "built at $((SECONDS - t0)) s"
for r in $(seq "${ROUNDS:-1}"); do for v in old new; do
  echo "$v r$r at $((SECONDS - t0)) s"
  PYTHONPATH=/tmp/cpu_$v python3 benchmarks/cpu/v91/softmax_ab.py 2>/dev/null
done; done
echo "tests at $((SECONDS - t0)) s"
PYTHONPATH=/tmp/cpu_new python3 -P -m pytest -q -p no:cacheprovider -n 8 tests/test_cpu_threads.py tests/test_softmax.py \
  -k "same_bits or few_long_rows or masked or nan_row or huge" 2>&1 | tail -3
echo "end at $((SECONDS - t0)) s"
