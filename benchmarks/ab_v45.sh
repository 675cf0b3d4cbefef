#!/usr/bin/env bash
# The v45 device calls (RESULTS.md "v45"): the f32 norm forward widths that norms.cu's rule leaves on v4's rows
# (norm_fwd_half.cuh; C = 768, 1024, 12288) with cached I/O, and the lean rows beside them.
#   half    benchmarks/norm_fwd_ab.cu mode half-io (in process, every output checked), twice.
#   ncu     Nsight Compute over the bench's bf16 LayerNorm and RMSNorm forwards at C = 8192 and 12288 (ours): the L1
#           and L2 hit rates (the parameters' loads), the warps' stalls, the instructions that wait.
#   verify  the norms' forward GPU tests beside compute-sanitizer memcheck and racecheck over every norm forward
#           kernel (sanitize.py --fwd).
#   big     the > 2^31-element norm forward tests.
#   nfwd    the bench's LayerNorm and RMSNorm forward, f32 and bf16, device timing.
#   nfb     the same, forward + backward.
set -uo pipefail
source "$(dirname "$0")/ab_lib.sh"

stage_half() { ab_norm_fwd_rounds half 200 half-io; }

stage_ncu() {
  local tag=ncu_bf16
  XLA_PYTHON_CLIENT_PREALLOCATE=false XLA_PYTHON_CLIENT_ALLOCATOR=platform timeout 200 \
    ncu --profile-from-start off --clock-control none --kernel-name regex:norm_fwd \
    --section SpeedOfLight --section WarpStateStats --section Occupancy --section SourceCounters \
    --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables \
    -f -o "$out/$tag" python3 benchmarks/ncu_profile.py layer_norm:fwd:bfloat16:8192:ours \
    layer_norm:fwd:bfloat16:12288:ours rms_norm:fwd:bfloat16:12288:ours > "$out/$tag.log" 2>&1
  tail -1 "$out/$tag.log"
  ncu -i "$out/$tag.ncu-rep" --page details > "$out/$tag.txt" 2>&1
  grep -E "^  [a-zA-Z_].*\(|DRAM Throughput|Duration|L1/TEX Hit|L2 Hit|Issue Slots Busy|Warp Cycles Per Issued|\
Achieved Occupancy|Registers Per|Stall" "$out/$tag.txt" | cut -c1-120
  local n
  for n in 0 1 2; do
    ncu -i "$out/$tag.ncu-rep" --page source --csv --print-source sass --launch-skip "$n" --launch-count 1 \
      > "$out/$tag-src-$n.csv" 2> "$out/$tag-src-$n.err"
  done
  python3 benchmarks/ncu_source.py "$out/$tag"-src-*.csv --top 6 --elements 67108864 | tee "$out/$tag-source.md"
}

stage_verify() { ab_norm_fwd_verify; }

stage_big() { ab_big_tests "big_norm_forward_f32 or big_layer_norm_forward or big_rms_norm_forward"; }

stage_nfwd() { ab_dbench nbench-fwd device --ops layer_norm rms_norm --dirs fwd --parts sweep; }

stage_nfb() { ab_dbench nbench-fb device --ops layer_norm rms_norm --dirs fwd+bwd --parts sweep; }

ab_init "$@"
ab_run v45
