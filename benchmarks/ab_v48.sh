#!/usr/bin/env bash
# The v48 device calls (RESULTS.md "v48"): the lean block rows holding R rows per block, each parameter pack loaded
# once for the R rows (norm_fwd_lean.cuh's R), and under register bounds (kRegs), for the 16-bit norm widths whose
# parameter loads v47 found to be their gap to the copy.
#   pairs   benchmarks/norm_fwd_ab.cu mode pairs (in process, every output checked), twice.
#   verify  the norms' forward GPU tests beside compute-sanitizer memcheck and racecheck over every norm forward kernel.
#   big     the > 2^31-element norm forward tests.
#   nfwd    the bench's LayerNorm and RMSNorm forward, f32 and bf16, device timing; then the same under
#           JAX_MEMOPS_NORM_FWD=v45 (the rule before v48) in a second process.
#   full    the whole bench, device timing (README's table, plots and ladder), into $out/full.
set -uo pipefail
source "$(dirname "$0")/ab_lib.sh"

stage_pairs() { ab_norm_fwd_rounds pairs 200 pairs; }

# The forward's GPU tests beside compute-sanitizer over every norm forward kernel, with more time than
# ab_norm_fwd_verify's default (twelve version scripts): sanitizers 300 s, tests 420 s (400 s per test).
stage_verify() { ab_norm_fwd_verify 300 420 400; }

stage_big() { ab_big_tests "big_norm_forward_f32 or big_layer_norm_forward or big_rms_norm_forward"; }

stage_nfwd() {
  ab_dbench nbench-fwd device --ops layer_norm rms_norm --dirs fwd --parts sweep
  JAX_MEMOPS_NORM_FWD=v45 ab_dbench nbench-fwd-v45 device --ops layer_norm rms_norm --dirs fwd --parts sweep
}

stage_full() { ab_full 400 "^(layer_norm|rms_norm) +fwd "; }

ab_init "$@"
ab_run v48
