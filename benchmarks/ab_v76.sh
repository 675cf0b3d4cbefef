#!/usr/bin/env bash
# The v76 device call (RESULTS.md "v76 and v77"): JAX_MEMOPS_SOFTMAX_FWD=v76 (every one-buffer cluster's rows by
# tickets at twice the rule's cluster size, 16-bit too) against the default (v75 when this first ran, at 356fd2a; since
# v77 the default runs v76's f32 plans) and v75: ab_v75.sh's stages (lib, long, bench, check; issues, ncuh) with
#   long     the harness's default against v76, v75 and v78, f32 50257 .. 262144 and bf16 100000 .. 262144;
#   bench    the default against v76 and v78 (v76 where the rule's 16-bit plan is one buffer);
#   check    the GPU tests of v76, v78 and of the doubled cluster size (their tickets over 1100 launches, their version
#            tests, the plan logs of v75, the default, v76 and v78) beside compute-sanitizer over cluster_race.py under
#            v76 (v78's kernels are v76's and v75's), within a T_END (default 400) s call.
# Any of the variables ab_v75.sh reads still overrides these.
export AB_VARIANTS=${AB_VARIANTS:-v76,v75,v78}
export LONG_CASES=${LONG_CASES:-f32:50257 f32:65536 f32:100000 f32:131072 f32:262144 bf16:100000 bf16:131072 \
bf16:262144}
export BENCH_VERSIONS=${BENCH_VERSIONS:-v76 v78} SAN_FWD=${SAN_FWD:-v76} T_END=${T_END:-400}
export TESTS_K=${TESTS_K:-gpu and (v76 or v78 or k_mult)}
exec bash "$(dirname "$0")/ab_v75.sh" "$@"
