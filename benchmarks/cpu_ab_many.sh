#!/usr/bin/env bash
# A CPU handlers' A/B on a many-core host (a device machine's CPUs), in one call from the repository root:
#   bash benchmarks/cpu_ab_many.sh PATCH forward|reverse SCRIPT [SCRIPT ...]
# builds the tree CPU-only twice, with PATCH applied (forward: the tree is old, the patch new) or reversed (reverse:
# the tree is new, the patch reversed old), into /tmp/cpu_old and /tmp/cpu_new; then ROUNDS (1) rounds, old and new
# alternating, of each SCRIPT (python3's arguments as one shell string) with PYTHONPATH on that build; then, where
# MANY_TESTS is set (pytest's arguments as one shell string), pytest over 8 workers on the new build. One log,
# $OUT/many.txt.
set -u
patch_file=$1 direction=$2; shift 2
o=${OUT:-/tmp/many}; mkdir -p "$o"; t0=$SECONDS; exec > >(tee "$o/many.txt") 2>&1
export JAX_PLATFORMS=cpu PYTHONUNBUFFERED=1 CMAKE_BUILD_PARALLEL_LEVEL=8 JAX_MEMOPS_CUDA=OFF
echo "CPUs: $(nproc); $patch_file $direction"
rm -rf /tmp/cpu_other_src && cp -r . /tmp/cpu_other_src
flag=""; [ "$direction" = reverse ] && flag=-R
(cd /tmp/cpu_other_src && patch -s $flag -p1 < "$patch_file") || { echo "the patch does not apply"; exit 1; }
tree=old other=new; [ "$direction" = reverse ] && tree=new other=old
(python3 -m pip install -q --no-build-isolation --no-deps --target /tmp/cpu_$tree . > /tmp/build_$tree.log 2>&1
 echo "$tree build rc=$?") & b1=$!
(cd /tmp/cpu_other_src && python3 -m pip install -q --no-build-isolation --no-deps --target /tmp/cpu_$other . \
  > /tmp/build_$other.log 2>&1; echo "$other build rc=$?") & b2=$!
wait $b1 $b2  # not a bare wait: it would wait for the tee too
echo "built at $((SECONDS - t0)) s"
for r in $(seq "${ROUNDS:-1}"); do for v in old new; do for script in "$@"; do
  echo "$v r$r $script at $((SECONDS - t0)) s"
  eval "PYTHONPATH=/tmp/cpu_$v python3 $script" 2>/dev/null
done; done; done
if [ -n "${MANY_TESTS:-}" ]; then
  echo "tests at $((SECONDS - t0)) s"
  eval "PYTHONPATH=/tmp/cpu_new python3 -P -m pytest -q -p no:cacheprovider -n 8 $MANY_TESTS" 2>&1 | tail -3
fi
echo "end at $((SECONDS - t0)) s"
