#!/usr/bin/env bash
# v90 on a many-core host (RESULTS.md, "The thirty-sixth session"): the CPU handlers as they are (new) against the tree
# with benchmarks/cpu/v90/v90.patch reversed (old); fusion_ab.py and dx_ab.py; then the new build's thread-count and
# column-tile tests. From the repository root: `bash benchmarks/cpu/v90/many.sh` (~2 min on 16 cores; run at v90,
# where the patch reverses cleanly); one log, $OUT/many.txt.
MANY_TESTS="tests/test_cpu_threads.py tests/test_gelu.py tests/test_cpu_buffers.py" \
  exec bash benchmarks/cpu_ab_many.sh benchmarks/cpu/v90/v90.patch reverse \
  benchmarks/cpu/v90/fusion_ab.py benchmarks/cpu/v90/dx_ab.py
