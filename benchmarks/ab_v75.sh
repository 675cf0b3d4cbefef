#!/usr/bin/env bash
# The v75 device call (RESULTS.md "v75"): the softmax forward's default since v75 (v74 with the f32 bulk-copy clusters'
# rows by tickets) against v74 and v73, and its checks.
#   lib      this tree into site-packages, beside softmax_long_ab.cu built for sm_90 (ab_v73.sh's harness stage).
#   long     softmax_long_ab over LONG_CASES (default f32 50257 .. 262144, bf16 131072), LONG_ROUNDS (default 1), the
#            default (v75) against AB_VARIANTS (default v74 and v73).
#   bench    the bench's forward (device timing) under the default and JAX_MEMOPS_SOFTMAX_FWD=BENCH_VERSIONS (default
#            v74), ROUNDS (default 1), C = BENCH_COLS (default 32768 .. 262144), f32 and bf16.
#   check    beside each other: the GPU tests of the tickets, of v74 and of the f32 forward past element 2**31
#            (TESTS_K), and compute-sanitizer racecheck (the merge rule; messages at every k) and memcheck over
#            cluster_race.py under the default (or JAX_MEMOPS_SOFTMAX_FWD=SAN_FWD), in the time left of a T_END
#            (default 560) s call; then the tests of BIG_K alone, in T_BIG s of it.
#   ncu      Nsight Compute over the bulk-copy kernels of NCU_CASES (default: the f32 and bf16 rows of 131072, bf16
#            100000; ours): where the 16-bit rows' warps wait, beside the f32 rows that the tickets sped up (RESULTS.md
#            "v75": in 16-bit the tickets even the exits and gain no time).
#   issues   the bench's sweep (device timing) over the issues' shapes under the default: softmax forward and backward
#            at issue 4's C (f32, bf16), LayerNorm and RMSNorm forward and forward + backward at issue 5's, beside XLA
#            and the copy of the same run.
#   ncuh     the same through the harness (no JAX in the profiled process: ncu over python3 segfaulted on the H100 of
#            the twenty-fourth session): the default's bulk-copy kernel at NCUH_CASES, one launch each after warm-up.
set -uo pipefail
here=$(dirname "$0")
source "$here/ab_lib.sh"

stage_harness() { ab_nvcc_harness softmax_long_ab.cu /tmp/softmax_long_ab cpp/softmax_ladder.cu; }

stage_lib() {
  ab_build_beside harness || return 1
}

stage_long() {
  LONG_ROUNDS=${LONG_ROUNDS:-1} ab_long_rounds "${AB_VARIANTS:-v74,v73}" \
    "${LONG_CASES:-f32:50257 f32:65536 f32:100000 f32:131072 f32:262144 bf16:131072}" 150
}

stage_bench() {
  # shellcheck disable=SC2086
  ROUNDS=${ROUNDS:-1} AB_TIMEOUT=200 ab_rounds v75- --var JAX_MEMOPS_SOFTMAX_FWD --versions "" ${BENCH_VERSIONS:-v74} \
    --dirs fwd --dtypes float32 bfloat16 --cols ${BENCH_COLS:-32768 50257 65536 100000 131072 262144} --timing device
}

stage_check() {
  local left=$((${T_END:-560} - SECONDS - ${T_BIG:-0}))
  left=$((left > 90 ? left : 90))
  ab_gpu_tests tests "$left" "${TESTS_K:-fwd_tickets or fwd_versions[v74] or fwd_l2_ahead or gpu_grid or \
big_softmax_forward_f32}" "$((left - 10))" &
  ab_cluster_race_beside "$((left - 5))" ${SAN_FWD:+JAX_MEMOPS_SOFTMAX_FWD=$SAN_FWD}  # its wait takes the tests too
  # BIG_K: the > 2**31-element tests on one worker after the rest (8 GiB tensors beside 8 workers and the sanitizers ran
  # an H100 out of memory in the twenty-fifth session), within T_BIG (default 0: none) s.
  [ -z "${BIG_K:-}" ] || ab_gpu_tests tests-big "${T_BIG:-150}" "$BIG_K" "$((${T_BIG:-150} - 10))" 1
}

stage_ncu() {
  ab_ncu_cases ncu regex:softmax_fwd_tma ${NCU_CASES:-softmax:fwd:float32:131072:ours softmax:fwd:bfloat16:131072:ours \
softmax:fwd:bfloat16:100000:ours}
}

stage_issues() {
  local log="$out/issues.log"
  XLA_PYTHON_CLIENT_PREALLOCATE=false timeout "${T_ISSUES:-300}" python3 -P -m jax_memops.cli bench --timing device \
    --parts sweep --ops softmax --dirs fwd bwd --dtypes float32 bfloat16 \
    --cols 128 512 1024 2048 4096 8192 32768 50257 131072 --out "$out/issues-softmax" > "$log" 2>&1
  echo "rc=$? (softmax)"
  XLA_PYTHON_CLIENT_PREALLOCATE=false timeout "${T_ISSUES:-300}" python3 -P -m jax_memops.cli bench --timing device \
    --parts sweep --ops layer_norm rms_norm --dirs fwd fwd+bwd --dtypes float32 bfloat16 \
    --cols 768 1024 2048 4096 8192 12288 --out "$out/issues-norms" >> "$log" 2>&1
  echo "rc=$? (norms)"
  grep -E "^(softmax|layer_norm|rms_norm) " "$log"
}

stage_ncuh() {
  [ -x /tmp/softmax_long_ab ] || stage_harness || return 1
  local c n=0
  for c in ${NCUH_CASES:-f32:131072 bf16:131072 bf16:100000}; do
    AB_VARIANTS=none timeout 120 ncu --clock-control none --kernel-name regex:softmax_fwd_tma --launch-skip 8 \
      --launch-count 1 --section SpeedOfLight --section WarpStateStats --section Occupancy --section SourceCounters \
      -f -o "$out/ncuh-$n" /tmp/softmax_long_ab "$c" > "$out/ncuh-$n.log" 2>&1
    echo "== $c: rc=$? $(tail -1 "$out/ncuh-$n.log")"
    ncu -i "$out/ncuh-$n.ncu-rep" --page details > "$out/ncuh-$n.txt" 2>&1
    grep -E "^  [a-zA-Z_].*\(|DRAM Throughput|Issue Slots Busy|Warp Cycles Per Issued|Achieved Occupancy|\
Registers Per|Duration" "$out/ncuh-$n.txt" | cut -c1-120
    ncu -i "$out/ncuh-$n.ncu-rep" --page source --csv --print-source sass > "$out/ncuh-src-$n.csv" 2> /dev/null
    n=$((n + 1))
  done
  python3 benchmarks/ncu_source.py "$out"/ncuh-src-*.csv --top 4 --elements 67108864 | tee "$out/ncuh-source.md"
}

ab_init "$@"
ab_run v75
