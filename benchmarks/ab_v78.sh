#!/usr/bin/env bash
# The v78 and v79 device calls (RESULTS.md "v78 and v79"): the default (v79 since the twenty-sixth session: v77 with its
# f32 clusters on the register kernels by tickets) against v77 (one buffer at twice the rule's k) and v78 (v77 with the
# 16-bit one-buffer clusters at twice the rule's k by tickets), through ab_v75.sh's stages (lib, long, bench, check,
# issues, ncuh) with
#   long     the harness's default against v77, v78 and the register kernels by tickets at k = 4, 8, 16 ([kr]: each CTA
#            refills its buffer with its next row's share as soon as it holds this row's in registers), f32 and bf16
#            50257 .. 262144;
#   bench    the default against v77;
#   check    the GPU tests of the doubled cluster size (the plan logs of v75, the default, v76, v77 and v78), of the
#            tickets over 1100 launches, of v77 and v78, beside compute-sanitizer over cluster_race.py under the
#            default, within a T_END (default 330) s call; BIG_K (e.g. "gpu and big_softmax_forward_f32", with
#            T_BIG=150) after them.
# Any of the variables ab_v75.sh reads still overrides these.
export AB_VARIANTS=${AB_VARIANTS:-v77,v78,[kr]}
export LONG_CASES=${LONG_CASES:-f32:50257 f32:131072 f32:262144 bf16:65536 bf16:100000 bf16:131072 bf16:262144}
export BENCH_VERSIONS=${BENCH_VERSIONS:-v77} T_END=${T_END:-330}
export TESTS_K=${TESTS_K:-gpu and (k_mult or fwd_tickets or v77 or v78)}
exec bash "$(dirname "$0")/ab_v75.sh" "$@"
