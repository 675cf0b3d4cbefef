#!/usr/bin/env bash
# v89's A/B on a many-core host (RESULTS.md, "The thirty-fifth session"): the CPU handlers as they are against
# benchmarks/cpu/v89/v89-chained-wakes.patch (the caller wakes one helper, each helper two more), timed by
# `cpu_pool_ab.py --gap` with 50 µs (a sleeping pool) and 0 µs between calls, ROUNDS rounds alternating. From the
# repository root: `ROUNDS=2 bash benchmarks/cpu_pool_many.sh` (~6 min on 16 cores); one log, $OUT/many.txt.
exec bash benchmarks/cpu_ab_many.sh benchmarks/cpu/v89/v89-chained-wakes.patch forward \
  "benchmarks/cpu_pool_ab.py --gap 50" "benchmarks/cpu_pool_ab.py --gap 0"
