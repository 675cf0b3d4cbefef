#!/usr/bin/env bash
# v92 on a many-core host (RESULTS.md, "The CPU handlers, v92"): the tree built CPU-only (new) against the tree with
# benchmarks/cpu/v92/v92.patch reversed (old); norms_ab.py on all the CPUs and on 4; then the new build's thread-count
# and norms tests. From the repository root: `bash benchmarks/cpu/v92/many.sh` (~4 min on 16 cores; run at v92, where
# the patch reverses cleanly); one log, $OUT/many.txt.
MANY_TESTS='tests/test_cpu_threads.py tests/test_norms.py -k "same_bits or few_long_rows or grad or forward"' \
  exec bash benchmarks/cpu_ab_many.sh benchmarks/cpu/v92/v92.patch reverse benchmarks/cpu/v92/norms_ab.py \
  "benchmarks/cpu/v92/norms_ab.py 4"
