#!/usr/bin/env bash
# v91 on a many-core host (RESULTS.md, "The CPU handlers, v91"): the tree built CPU-only (new) against the tree with
# benchmarks/cpu/v91/v91.patch reversed (old); softmax_ab.py; then the new build's thread-count and long-row softmax
# tests. From the repository root: `bash benchmarks/cpu/v91/many.sh` (~2 min on 16 cores; run at v91, where the patch
# reverses cleanly); one log, $OUT/many.txt.
MANY_TESTS='tests/test_cpu_threads.py tests/test_softmax.py -k "same_bits or few_long_rows or masked or nan_row"' \
  exec bash benchmarks/cpu_ab_many.sh benchmarks/cpu/v91/v91.patch reverse benchmarks/cpu/v91/softmax_ab.py
