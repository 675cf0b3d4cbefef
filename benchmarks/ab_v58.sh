#!/usr/bin/env bash
# The v58 device calls (RESULTS.md "v57"): v57's rule for the norms' forward into another dtype (run on a GPU only in
# its first form) and the candidates v58 (JAX_MEMOPS_NORM_FWD=v58: bf16 x into f32 on the lean rows at 4 packs per
# thread, RMSNorm too) and v59 (v58, and v3's rows with cached I/O for the rows into another dtype left on them),
# checked and measured against the default and v48 (the rule before v57). Run in the fourteenth session (an H200):
# since then the default is v60 (v59, its bf16 rows into f32 on the lean rows to C = 12288), v57 the rule before it,
# and v58 v60 with v3's rows streaming (v59 names nothing now), and the stages run those by default. Since the
# fifteenth session (RESULTS.md "v61") the default is v61 (v3's rows cached only into a narrower dtype), v60 the rule
# before it, v62 the candidate of whole-sector stores (norm_fwd_lean.cuh's kSectors); `test` ran the version test
# under "", v48, v57, v58, v60 and v62, `mixed` timed v62's kernels beside v60's, and `VERSIONS="default v62" ab`
# and `LAYERS_VERSIONS="default v62" layers` measured it in the bench and the Flax layers (the sixteenth session, an
# H100: RESULTS.md "v62"). Since then v62 is the default and v61 the rule before it: `test` runs the version test under
# "", v63, v64, v48, v57, v58, v60 and v61, and `VERSIONS="default v61"` / `LAYERS_VERSIONS="default v61"` repeat
# that A/B; v63 and v64 are that session's candidates (v63: v3's rows from 16-bit x into f32 in whole sectors too; v64:
# v63 with the lean rows' sectors made by swapping halves of x, not of y): `wide` measured both, `SAN_VERSIONS="v63"
# san` sanitized v63's kernels (the seventeenth session, an H200: RESULTS.md "v63"). Since then the default is v65 (v62
# but for LayerNorm's lean rows of 3 packs a thread or blocks over 256 threads, and v3's rows from 16-bit x into f32
# in whole sectors, RMSNorm's at every C, LayerNorm's to C = 12288), v62 the rule before it; v64 is gone (1-2% slower
# than v63): `WIDE_VERSIONS="default v62" WIDE_COLS="..." wide` measured v65 (on an H100). v66 and v67 are that
# session's candidates (v66: v65, and the f16 pairs on the lean rows as bf16's; v67: v66, and f16 rows of x's dtype on
# the lean rows too): `f16` measures both, `SAN_VERSIONS=v67 SAN_OPS="layer_norm layer_norm_noparams layer_norm_scale
# rms_norm layer_norm_dtype rms_norm_dtype layer_norm_dtype16 rms_norm_dtype16" san` sanitizes their kernels. Since the
# eighteenth session (an H100: RESULTS.md "v66 to v68") the default is v68 (v67 but LayerNorm's f16 rows in blocks
# over 256 threads on v3's rows) and v65 the rule before it: `f16` measures the default against v65.
#   build    this tree into site-packages (sm_90).
#   test     the output dtype's GPU tests (test_norm_dtype; test_norm_forward_out_dtype_versions under the versions
#            the test names) and the tests whose names carry no device, which on this machine run on the GPU (8 workers;
#            TEST_K: another pytest -k expression).
#   san      compute-sanitizer memcheck, then racecheck, over the dtype ops (sanitize.py --only layer_norm_dtype
#            rms_norm_dtype, or SAN_OPS), under the default and v58 (SAN_VERSIONS), one run at a time (racecheck run
#            beside other sanitizers died of the tool's own segmentation fault on the H100; alone, each took ~45 s; on
#            the H200 a third of the runs still died so, at random: ab_sanitize_resume goes on from the check it died
#            in).
#   ab       the forward of both norms into another dtype (bench --out-dtypes, device timing) under the default, v57,
#            v58 and v48 (VERSIONS, the first the ratios' base), each its own process (~35-45 s), per round of ROUNDS
#            (default "1 2"); the ms of each and the ratios to the default's (< 1: faster than the default), the
#            same-dtype rows the A/A (the same kernels in all).
#   wide     the same for the rows from 16-bit x into f32: bf16 and f16 x at C = 1024, 4096 (bf16: the lean rows),
#            16384 and 24576 (WIDE_COLS) under the default, v63 and v62 (WIDE_VERSIONS).
#   f16      the same for f16 x into f32, f32 x into f16 and f16 rows (the f32 rows the A/A) at C = 768 to 12288
#            under the default and v65 (F16_VERSIONS; the eighteenth session ran v66 and v67 beside v65).
#   layers   norm_layers_ab.py's widening configuration at C = 1024 and 4096 (LAYERS_COLS; device timing), under the
#            default and v57 (LAYERS_VERSIONS; each case took 50-65 s on the H100, ~40 s on the H200: 4 cases per C;
#            in the sixteenth session an H100 took 280 s for 3: T_LAYERS, the seconds per version, 280 unless given).
#   ncu      Nsight Compute over the bf16-into-f32 forwards at C = 1024 (LayerNorm, RMSNorm; the same-dtype RMSNorm
#            beside them) and XLA's fused RMSNorm there (ab_lib.sh's ab_ncu_cases).
#   mixed    benchmarks/norm_mixed_ab.cu (in one process): v60's bf16-into-f32 rows of both norms at fewer CTAs per SM
#            (RMSNorm's 48 registers hold 5 CTAs of 256 threads where LayerNorm's 56 hold 4), v62's (whole-sector
#            stores), the widening alone (half-sector and whole-sector stores) and the copy, two rounds (~15 s each).
# Calls (10 minutes each at most): `build ab test`, then `ab san`, then `san layers` on the H200 (~100 s for the ab
# stage's round, ~135 s for the tests, ~210 s for three versions' sanitizers); on a machine still warm from the call
# before, leave out `build` (the install stays in site-packages). After v60 (RESULTS.md "v60"): `build test ab` with
# VERSIONS="default v57", then `ncu layers` with LAYERS_COLS=1024 LAYERS_VERSIONS=default.
set -uo pipefail
source "$(dirname "$0")/ab_lib.sh"

stage_test() {
  local k="(gpu and (dtype or out_dtype) and not slow) or (not gpu and not cpu and not slow)"
  ab_gpu_tests test 300 "${TEST_K:-$k}" 200
  local rc=$?  # the stage's status is pytest's (a grep that finds no failure would make it 1)
  grep -E "^(FAILED|ERROR)" "$out/test.log" | head -20
  return $rc
}

stage_san() {
  local v tool
  for v in ${SAN_VERSIONS:-default v58}; do
    for tool in memcheck racecheck; do  # resumed where the tool itself crashed (ab_sanitize_resume)
      JAX_MEMOPS_NORM_FWD=${v#default} ab_sanitize_resume $tool "$v" kns=_kernel 150 --only \
        ${SAN_OPS:-layer_norm_dtype rms_norm_dtype}
    done
  done
}

stage_ab() {
  bench_rounds ab "${VERSIONS:-default v57 v58 v48}" --dtypes bfloat16 float32 --out-dtypes float32 bfloat16
}

# v63 (a candidate of the sixteenth session; by default since v65 RMSNorm's at every C, LayerNorm's to 12288): v3's
# rows from 16-bit x into f32 with whole-sector stores. f16 x takes v3's rows at every C, bf16 x beyond the lean rows'
# C = 12288; v62 / default at bf16 768 / 12288 LayerNorm is v65's change to the lean rows; the same-dtype rows are the
# A/A.
stage_wide() {
  bench_rounds wide "${WIDE_VERSIONS:-default v63 v62}" --dtypes bfloat16 float16 --out-dtypes float32 \
    --cols ${WIDE_COLS:-1024 4096 16384 24576}
}

# v66 (a candidate of the seventeenth session): f16 x into f32 on the lean rows at 4 packs per thread as bf16's (on
# the H200 v3's rows read 86-87% of the copy for LayerNorm there, the lean rows 95% for bf16), f32 x into f16 on the
# tuned block rows as into bf16; v67: v66, and f16 rows on the lean rows at 4 packs per thread too (v3's rows there ran
# 4-9% behind bf16's lean rows on the H200); v68, the default since: v67 but LayerNorm's over 256 threads.
stage_f16() {
  bench_rounds f16 "${F16_VERSIONS:-default v65}" --dtypes float16 float32 --out-dtypes float32 float16 \
    --cols 768 1024 2048 4096 8192 12288
}

# bench_rounds NAME VERSIONS BENCH-ARGS...: the norms' forward in the bench (device timing) under each version (the
# first the ratios' base), each its own process, per round of ROUNDS (default "1 2"); the ms of each and the ratios.
bench_rounds() {
  local name=$1 versions=$2 round v dirs
  shift 2
  for round in ${ROUNDS:-1 2}; do
    dirs=()
    for v in $versions; do
      JAX_MEMOPS_NORM_FWD=${v#default} timeout 150 python3 -P -m jax_memops.cli bench --ops layer_norm rms_norm \
        "$@" --dirs fwd --parts sweep --timing device --out "$out/$name-r$round-$v" > "$out/$name-r$round-$v.log" 2>&1
      echo "rc=$? ($v, round $round)"
      dirs+=("$out/$name-r$round-$v")
    done
    bench_ratios "${dirs[@]}" | tee "$out/$name-r$round.md"
  done
}

# bench_ratios DIR...: the bench's results.md of each run, side by side: each row's ms and its ratio to the first's.
bench_ratios() {
  python3 - "$@" <<'PY'
import os, sys
def rows(folder):
    out = {}
    for line in open(os.path.join(folder, "results.md")):
        f = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(f) > 4 and "x" in f[3] and f[3].replace("x", "").isdigit():
            out[tuple(f[:4])] = float(f[4])  # (op, dir, dtype, shape) -> ours ms
    return out
runs = [(os.path.basename(p), rows(p)) for p in sys.argv[1:]]
first = runs[0][1]
print("| op | dir | dtype | shape | " + " | ".join(f"{n} ms" for n, _ in runs) + " | "
      + " | ".join(f"{n} / {runs[0][0]}" for n, _ in runs[1:]) + " |")
print("|---" * (4 + 2 * len(runs) - 1) + "|")
for k, ms in first.items():
    t = [r.get(k) for _, r in runs]
    if None not in t:
        print(f"| {' | '.join(k)} | " + " | ".join(f"{v:.4f}" for v in t) + " | "
              + " | ".join(f"{v / ms:.3f}" for v in t[1:]) + " |")
PY
}

stage_layers() {
  local v
  for v in ${LAYERS_VERSIONS:-default v57}; do
    JAX_MEMOPS_NORM_FWD=${v#default} timeout ${T_LAYERS:-280} python3 -P benchmarks/norm_layers_ab.py --timing device \
      --configs widening --cols ${LAYERS_COLS:-1024 4096} > "$out/layers-$v.log" 2>&1
    echo "rc=$? ($v)"
    cat "$out/layers-$v.log"
  done
}

# Where the widening RMSNorm forward's time goes (v60: 85-90% of the copy, LayerNorm's rows of the same plan 91-93%):
# our bf16-into-f32 forwards at C = 1024 beside the same-dtype RMSNorm, then XLA's fused RMSNorm (~89%).
stage_ncu() {
  ab_ncu_cases ncu-ours "regex:norm_fwd" "layer_norm:fwd:bfloat16>float32:1024:ours" \
    "rms_norm:fwd:bfloat16>float32:1024:ours" "rms_norm:fwd:bfloat16:1024:ours"
  ab_ncu_cases ncu-xla "regex:." "rms_norm:fwd:bfloat16>float32:1024:xla"
}

stage_mixed() {
  local r
  ab_nvcc_harness norm_mixed_ab.cu /tmp/norm_mixed_ab -Xptxas -v || return 1
  for r in 1 2; do
    timeout 120 /tmp/norm_mixed_ab > "$out/mixed_r$r.md" 2>&1
    echo "rc=$? (round $r)"
    cat "$out/mixed_r$r.md"
  done
}

ab_init "$@"
ab_run v58
