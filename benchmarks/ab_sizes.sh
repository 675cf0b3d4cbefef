#!/usr/bin/env bash
# The long rows' cost per launch against their cost per byte (RESULTS.md "The long rows' cost per launch"): the
# softmax forward's harness at several tensor sizes, with and without the host's launch path in the timed intervals.
#   harness  softmax_long_ab.cu built for sm_90 (ab_v75.sh's harness stage).
#   sizes    softmax_long_ab over SIZES_CASES (default f32 50257, 131072; bf16 100000, 131072, 262144), the default
#            against SIZES_VARIANTS (default v77, v78 and the register kernels by tickets, [kr]), at 2^L elements for L
#            in SIZES_LOG2 (default 26 28), each with AB_SPIN_US in SIZES_SPIN (default 0 50: the host's launch path
#            timed, then kept out; inproc_ab.cuh spin_ns); one process per size and spin, at most 150 s each.
#   launch   launch_cost.cu: the default's bulk-copy kernels launched over no rows, beside empty kernels of the same
#            grid (plain, in clusters, with the same shared memory).
#   trace    the harness built with -DJM_TRACE_EXITS, AB_TRACE=1 at 2^L elements for L in TRACE_LOG2 (default 26): per
#            variant one traced launch, when its CTAs started, their first rows' shares landed, merged (and the steps
#            between) and went out, and how long their last rows took (the ramp and the drain), beside the SMs' last
#            exits.
# Fit t = F + bytes / B per variant from two sizes (the tables' GB/s and rows): RESULTS.md shows how.
set -uo pipefail
here=$(dirname "$0")
source "$here/ab_lib.sh"
variants=${SIZES_VARIANTS:-v77,v78,[kr]}
cases=${SIZES_CASES:-f32:50257 f32:131072 bf16:100000 bf16:131072 bf16:262144}
rows_shown='^\*\*|^\| (default|v[0-9]|registers|copy: 1)'  # the tables' rows each stage prints (every version's)

stage_harness() { ab_nvcc_harness softmax_long_ab.cu /tmp/softmax_long_ab cpp/softmax_ladder.cu; }

stage_sizes() {
  [ -x /tmp/softmax_long_ab ] || stage_harness || return 1
  local l spin
  for l in ${SIZES_LOG2:-26 28}; do
    for spin in ${SIZES_SPIN:-0 50}; do
      # shellcheck disable=SC2086
      AB_ELEMS_LOG2=$l AB_SPIN_US=$spin AB_VARIANTS=$variants timeout 150 /tmp/softmax_long_ab $cases \
        > "$out/sizes-$l-spin$spin.md" 2>&1
      echo "== 2^$l, spin $spin us: rc=$?"
      grep -E "$rows_shown" "$out/sizes-$l-spin$spin.md" | cut -c1-110
    done
  done
}

stage_trace() {
  ab_nvcc_harness softmax_long_ab.cu /tmp/softmax_long_ab_trace cpp/softmax_ladder.cu -DJM_TRACE_EXITS || return 1
  local l
  for l in ${TRACE_LOG2:-26}; do
    # shellcheck disable=SC2086
    AB_TRACE=1 AB_ELEMS_LOG2=$l AB_SPIN_US=50 AB_VARIANTS=$variants timeout 150 /tmp/softmax_long_ab_trace $cases \
      > "$out/trace-$l.md" 2>&1
    echo "== 2^$l, traced: rc=$?"
    grep -E "$rows_shown|^\| variant \(traced" "$out/trace-$l.md" | cut -c1-160
  done
}

stage_launch() {
  ab_nvcc_harness launch_cost.cu /tmp/launch_cost cpp/softmax_ladder.cu || return 1
  timeout 60 /tmp/launch_cost > "$out/launch_cost.md" 2>&1
  echo "rc=$?"
  cat "$out/launch_cost.md"
}

ab_init "$@"
ab_run sizes
