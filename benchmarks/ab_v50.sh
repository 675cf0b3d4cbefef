#!/usr/bin/env bash
# The v50 device calls (RESULTS.md "v50"): the softmax forward's long rows on other bulk-copy plans now that each CTA
# prefetches its next row into L2 (v49): one CTA per SM holding a whole row (k = 1, no merge across CTAs), larger CTAs,
# cluster sizes between the powers of two, two buffers prefetching the row after next, and the prefetch at L2's
# evict_last priority (JAX_MEMOPS_SOFTMAX_FWD=v50).
#   harness  softmax_long_ab.cu built for sm_90.
#   long     softmax_long_ab over LONG_CASES (default below), LONG_ROUNDS (default "1 2").
#   lib      this tree into site-packages.
#   rounds   rounds.py (device timing) around whole waves: bf16 LayerNorm 12288 / 8192 (v48's pair rows, 528 / 792 rows
#            a wave), softmax bf16 50257 (v14's L2 two-pass rows, 264 a wave): does the last, partial wave cost a
#            whole wave's time at these row counts?
#   ctests   the bulk-copy cluster's GPU tests (slow ones included) after force_k / any forced k: the plans, the
#            prefetch's plans, the merges, 8 workers.
#   For the next session (v50 as the default's candidate; `lib` first):
#   vtests   test_gpu_fwd_l2_ahead (the default v49, v50's hint and v27 at the rules' and forced cluster sizes) and
#            test_gpu_fwd_versions[v50] (and v27), 8 workers. (Call 6 ran its first part alone, as a stage atests, and
#            ran out of device time one test in.)
#   san50    compute-sanitizer memcheck and racecheck over the softmax forward kernels under JAX_MEMOPS_SOFTMAX_FWD=v50
#            (sanitize.py --fwd: its SOFTMAX_AHEAD_SHAPES run the prefetch).
#   sbench50 the bench's softmax forward (device timing) under the default and under v50, one process each.
#   (then `harness long` with LONG_ROUNDS="1 2 3": the handler's v49 against v50 in three processes' worth of rounds.)
#   ncu      Nsight Compute over the harness's first launches per case (the default twice, v27, the bulk copy at 75
#            and 100%; bf16 50257: v14's L2 two-pass kernel): DRAM bytes read and written against the tensor's, L2 hit
#            rates, throughput; does the prefetch cost extra HBM reads (prefetched lines evicted before their copy)?
set -uo pipefail
source "$(dirname "$0")/ab_lib.sh"

stage_harness() { ab_nvcc_harness softmax_long_ab.cu /tmp/softmax_long_ab cpp/softmax_ladder.cu; }

stage_long() {
  for round in ${LONG_ROUNDS:-1 2}; do
    # shellcheck disable=SC2086
    timeout 250 /tmp/softmax_long_ab ${LONG_CASES:-f32:50257 f32:65536 f32:131072 bf16:50257 bf16:100000 \
      bf16:131072} > "$out/softmax_long_ab_r$round.md" 2>&1
    echo "rc=$?"
    grep -h "^|\|^\*\*" "$out/softmax_long_ab_r$round.md" | grep -v "^|---" | cut -c1-120
  done
}

stage_lib() { ab_build; }

stage_rounds() {
  XLA_PYTHON_CLIENT_PREALLOCATE=false timeout 400 python3 -P benchmarks/rounds.py --timing device \
    layer_norm:fwd:bfloat16:12288:5280,5400,5461,5544,5700,5808 layer_norm:fwd:bfloat16:8192:7920,8192,8400,8712 \
    softmax:fwd:bfloat16:50257:1320,1335,1400,1452,1584 > "$out/rounds.md" 2> "$out/rounds.err"
  echo "rc=$?"
  cat "$out/rounds.md"
}

stage_ctests() {
  ab_gpu_tests ctests 400 "fwd_cluster_plans or fwd_l2_ahead or fwd_push_reduce or fwd_tie_rule" 280
  grep -E "passed|failed|FAILED|ERROR" "$out/ctests.log" | tail -5
}

stage_vtests() {
  ab_gpu_tests vtests 400 "fwd_l2_ahead or (fwd_versions and (v50 or v27))" 280
  grep -E "passed|failed|FAILED|ERROR" "$out/vtests.log" | tail -5
}

stage_san50() { JAX_MEMOPS_SOFTMAX_FWD=v50 SAN_ARGS=--fwd ab_sanitize san50 kns=softmax_fwd 220 softmax; }

stage_sbench50() {
  ab_dbench sbench-v49 device --ops softmax --dirs fwd --parts sweep
  JAX_MEMOPS_SOFTMAX_FWD=v50 ab_dbench sbench-v50 device --ops softmax --dirs fwd --parts sweep
}

stage_ncu() {
  local c
  for c in ${NCU_CASES:-f32:50257 f32:131072 bf16:131072 bf16:50257}; do
    timeout 200 ncu --clock-control none --kernel-name regex:"softmax_fwd_(tma|l2)" --launch-count 5 \
      --section SpeedOfLight --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables \
      -f -o "$out/ncu_${c/:/_}" /tmp/softmax_long_ab "$c" > "$out/ncu_${c/:/_}.log" 2>&1
    echo "rc=$? ($c)"
    ncu -i "$out/ncu_${c/:/_}.ncu-rep" --page details > "$out/ncu_${c/:/_}.txt" 2>&1
    grep -E "^  [a-zA-Z_].*\(|Duration|DRAM Throughput|Memory Throughput|L2 Hit Rate|Mem Busy|Max Bandwidth" \
      "$out/ncu_${c/:/_}.txt" | cut -c1-110
    ncu -i "$out/ncu_${c/:/_}.ncu-rep" --page raw --csv > "$out/ncu_${c/:/_}.csv" 2>&1
  done
}

ab_init "$@"
ab_run v50
