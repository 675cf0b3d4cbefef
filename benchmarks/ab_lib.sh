# Sourced by the ab_v*.sh experiment drivers (one device call each runs some of a driver's stages): the
# output folder, the builds, and the one archive the device brings back (it returns only a few files).
#   ab_init "$@"       $out (= $OUT, else ./ab-out), $stages (the arguments, else "build test ab")
#   ab_build           this tree into site-packages (sm_90 only); on failure the log's tail, status 1
#   ab_build_old       build/old (an older commit's tree, carried to the device) into /tmp/oldsite, for
#                      A/Bs by PYTHONPATH (softmax_ab.py --var PYTHONPATH --versions /tmp/oldsite "")
#   ab_pack NAME       everything under $OUT into $OUT/NAME-<stages>.tgz (nothing without $OUT)
#   ab_run, ab_gpu_tests, ab_check, ab_norm_bwd_verify, ab_softmax_fwd_verify, ab_sanitize, ab_norm_sanitize,
#   ab_norm_fwd_verify, ab_norm_fwd_rounds, ab_norm_sweep, ab_big_tests,
#   ab_sanitize_resume, ab_against_old, ab_rounds, ab_softmax_final, ab_cluster_race, ab_ncu_cases, ab_inproc,
#   ab_smxab, ab_san_cpu, ab_dbench, ab_version_table, ab_norm_btest, ab_norm_versions, ab_norm_ptest,
#   ab_norm_sanr, ab_norm_verify, ab_norm_big, ab_norm_nver, ab_norm_nbench, ab_bwd_vtest, ab_full, ab_build_beside,
#   ab_long_rounds, ab_race_run, ab_cluster_race_beside: below

ab_init() {
  out=${OUT:-$PWD/ab-out}
  mkdir -p "$out"
  export PYTHONUNBUFFERED=1
  stages="${*:-build test ab}"
}

# stage_build: the default build stage of the drivers (a driver may define its own after sourcing this file).
stage_build() { ab_build || exit 1; }

ab_build() {
  JAX_MEMOPS_CUDA=ON JAX_MEMOPS_CUDA_ARCHS=90 python3 -m pip install --no-build-isolation --no-deps -v . \
    > "$out/build.log" 2>&1 || { tail -30 "$out/build.log"; return 1; }
}

ab_build_old() {
  (cd build/old && JAX_MEMOPS_CUDA=ON JAX_MEMOPS_CUDA_ARCHS=90 python3 -m pip install --no-build-isolation \
    --no-deps --target /tmp/oldsite . > "$out/build-old.log" 2>&1)
}

ab_pack() {
  [ -n "${OUT:-}" ] || return 0
  local tgz=/tmp/$1-$$.tgz
  tar czf "$tgz" -C "$OUT" . && rm -rf "${OUT:?}"/* && mv "$tgz" "$OUT/$1-${stages// /-}.tgz"
}

# ab_run NAME: each of $stages as the driver's function stage_<stage>, timed (a stage's failing status
# is shown and the next stage runs; a failed build exits the driver), then ab_pack NAME.
ab_run() {
  local stage t0 rc
  for stage in $stages; do
    t0=$SECONDS
    if declare -F "stage_$stage" > /dev/null; then
      "stage_$stage"
      rc=$?
      [ $rc -eq 0 ] || echo "== $stage: status $rc"
    else
      echo "== no stage $stage"
    fi
    echo "== $stage: $((SECONDS - t0)) s"
  done
  ab_pack "$1"
}

# ab_dbench NAME TIMING BENCH-OPTIONS...: one bench process, its rows and tables shown.
ab_dbench() {
  local name=$1 timing=$2
  shift 2
  timeout 280 python3 -P -m jax_memops.cli bench --timing "$timing" --dtypes float32 bfloat16 --out "$out/$name" "$@" \
    > "$out/$name.log" 2>&1
  echo "rc=$? ($name)"
  grep -E "^(softmax|layer_norm|rms_norm|gelu) |^ +[0-9]+ (float32|bfloat16)" "$out/$name.log"
}

# ab_gpu_tests LOG SECONDS EXPR [PER-TEST SECONDS [WORKERS]]: pytest -k EXPR over tests/ (WORKERS, default 8,
# sharing the GPU; per test 150 s unless given), the last line shown; pytest's status (124 where the time ran out).
ab_gpu_tests() {
  XLA_PYTHON_CLIENT_PREALLOCATE=false timeout "$2" python3 -P -m pytest -q -rfE -n "${5:-8}" --timeout "${4:-150}" \
    -k "$3" tests > "$out/$1.log" 2>&1
  local rc=$?
  tail -n 1 "$out/$1.log"
  return $rc
}

# ab_check: compute-sanitizer memcheck and racecheck over sanitize.py's default and A/B workloads
# (gpu_check.sh sanitize; logs into $out), then the > 2^31-element GPU tests, one at a time.
ab_check() {
  T_SAN=300 bash benchmarks/gpu_check.sh sanitize 2>&1 | tail -8
  cp gpu-out/*.log gpu-out/*.rc "$out/" 2>/dev/null
  XLA_PYTHON_CLIENT_PREALLOCATE=false timeout 240 python3 -P -m pytest -v -rfEs --timeout 200 \
    -k "gpu and slow and big" tests > "$out/pytest-big.log" 2>&1
  grep -E "PASSED|FAILED|SKIPPED|ERROR" "$out/pytest-big.log" | sed 's/ *\[.*//' | tail -15
  tail -n 1 "$out/pytest-big.log"
}

# ab_norm_bwd_verify TAG: the norms' backward versions' GPU test (fresh processes, 5 workers) beside
# ab_norm_sanitize TAG over every kernel, then the > 2^31-element LayerNorm backward; a line each
# ($out/versions.log, big.log).
ab_norm_bwd_verify() {
  XLA_PYTHON_CLIENT_PREALLOCATE=false timeout 300 python3 -P -m pytest -q -rfE -n 5 --timeout 280 \
    -k "norm_backward_versions" tests/test_gpu.py > "$out/versions.log" 2>&1 &
  ab_norm_sanitize "$1" kns=_kernel 280
  tail -n 1 "$out/versions.log"
  XLA_PYTHON_CLIENT_PREALLOCATE=false timeout 170 python3 -P -m pytest -q -rfEs --timeout 160 \
    -k "big_layer_norm_backward" tests/test_gpu.py > "$out/big.log" 2>&1
  tail -n 1 "$out/big.log"
}

# ab_softmax_fwd_verify TAG VERSION FILTER: the softmax forward's GPU tests (every size class and dtype,
# special values, poisoned outputs, many rows; test_gpu_fwd_versions[VERSION]) beside ab_sanitize TAG over
# the softmax kernels matching FILTER, then the > 2^31-element forward; a line each ($out/TAG-tests.log,
# TAG-big.log).
ab_softmax_fwd_verify() {
  XLA_PYTHON_CLIENT_PREALLOCATE=false timeout 280 python3 -P -m pytest -q -rfE -n 8 --timeout 270 -k "(gpu and \
softmax and not slow and not big and not forward_axis and (test_forward or auto_size_classes_forward or auto_many_rows \
or special_values or nan_row or huge_logits or masked_neg_inf or stale_and_poisoned)) or fwd_versions[$2]" tests \
    > "$out/$1-tests.log" 2>&1 &
  ab_sanitize "$1" "$3" 250 softmax
  tail -n 1 "$out/$1-tests.log"
  XLA_PYTHON_CLIENT_PREALLOCATE=false timeout 100 python3 -P -m pytest -q -rfEs --timeout 90 \
    -k "big_softmax_forward and auto" tests/test_gpu.py > "$out/$1-big.log" 2>&1
  tail -n 1 "$out/$1-big.log"
}

# ab_sanitize TAG FILTER SECONDS OP...: compute-sanitizer memcheck and racecheck side by side over
# sanitize.py's OPs (--kernel-name FILTER, e.g. kns=_kernel; SAN_ARGS, e.g. --fwd, before --only), then a line each
# from $out/<tool>-TAG.log. Waits for every background job of the caller too.
ab_sanitize() {
  local tag=$1 filter=$2 secs=$3 tool
  shift 3
  for tool in memcheck racecheck; do
    # shellcheck disable=SC2086
    XLA_PYTHON_CLIENT_PREALLOCATE=false XLA_FLAGS=--xla_gpu_enable_command_buffer= timeout "$secs" \
      compute-sanitizer --tool $tool --kernel-name "$filter" --error-exitcode 3 \
      python3 benchmarks/sanitize.py ${SAN_ARGS:-} --only "$@" > "$out/$tool-$tag.log" 2>&1 &
  done
  wait
  for tool in memcheck racecheck; do
    echo "$tool: $(grep -E 'SUMMARY|checks passed' "$out/$tool-$tag.log" | tail -2 | tr '\n' ' ')"
  done
}

# ab_sanitize_resume TOOL TAG FILTER SECONDS SANITIZE-ARGS...: compute-sanitizer TOOL (--kernel-name FILTER)
# over benchmarks/sanitize.py SANITIZE-ARGS (e.g. --fwd --only softmax), a line per run ($out/TOOL-TAG-<run>.log).
# A crash of the tool itself (its SIGSEGV, "Internal Sanitizer Error") ends a run in check N, the last it
# printed: the next run starts at N again (sanitize.py --from), past it when it crashed there twice; SAN_TRIES
# runs (default 4) at most.
ab_sanitize_resume() {
  local tool=$1 tag=$2 filter=$3 secs=$4 from=0 try rc last log
  shift 4
  for try in $(seq "${SAN_TRIES:-4}"); do
    log="$out/$tool-$tag-$try.log"
    XLA_PYTHON_CLIENT_PREALLOCATE=false XLA_FLAGS=--xla_gpu_enable_command_buffer= timeout "$secs" \
      compute-sanitizer --tool "$tool" --kernel-name "$filter" --error-exitcode 3 \
      python3 benchmarks/sanitize.py --from $from "$@" > "$log" 2>&1
    rc=$?
    last=$(grep -oE '^\[[0-9]+\]' "$log" | tail -1 | tr -d '[]')
    echo "$tool $tag --from $from: rc=$rc last check ${last:-none}:" \
      "$(grep -E 'SUMMARY|checks passed' "$log" | tail -2 | tr '\n' ' ')"
    if grep -q "checks passed" "$log" || [ -z "$last" ]; then break; fi
    if [ "$last" -eq "$from" ] && [ "$try" -gt 1 ]; then from=$((last + 1)); else from=$last; fi
  done
}

# ab_norm_sanitize TAG FILTER [SECONDS]: ab_sanitize over the norms (default 280 s).
ab_norm_sanitize() { ab_sanitize "$1" "$2" "${3:-280}" layer_norm rms_norm; }

# ab_norm_fwd_verify: the norms' forward GPU tests (size classes, versions, row groups, large mean) beside
# compute-sanitizer memcheck and racecheck over every norm forward kernel (sanitize.py --fwd: layer_norm, its
# scale-only and parameter-free forms, rms_norm); the tests' last line, each tool's checks and summaries. Optional
# arguments: the sanitizers' seconds, the tests' seconds, seconds per test (default 280, 280, 270).
ab_norm_fwd_verify() {
  SAN_ARGS=--fwd ab_sanitize nfwd kns=norm_fwd "${1:-280}" layer_norm layer_norm_scale layer_norm_noparams rms_norm &
  ab_gpu_tests nverify-tests "${2:-280}" "norm_forward_classes or norm_forward_versions" "${3:-270}"
  wait
  local log
  for log in memcheck-nfwd racecheck-nfwd; do
    echo "$log: $(grep -cE '^\[' "$out/$log.log") checks run; $(grep -E 'SUMMARY|checks passed|Internal' \
      "$out/$log.log" | sort | uniq -c | tr '\n' ' ')"
  done
}

# ab_norm_sweep DIR TAG: the bench's LayerNorm and RMSNorm sweep in direction DIR, f32 and bf16, one process
# ($out/sweep-TAG.log); its rows shown.
ab_norm_sweep() {
  timeout 200 python3 -P -m jax_memops.cli bench --ops layer_norm rms_norm --dirs "$1" --parts sweep \
    --dtypes float32 bfloat16 --out "$out/sweep-$2" > "$out/sweep-$2.log" 2>&1
  grep -E "^(layer|rms)_norm" "$out/sweep-$2.log"
}

# ab_big_tests EXPR: tests/test_gpu.py's tests -k EXPR (the > 2^31-element ones; 200 s), each outcome shown.
ab_big_tests() {
  XLA_PYTHON_CLIENT_PREALLOCATE=false timeout 200 python3 -P -m pytest -v -rfEs --timeout 190 -k "$1" \
    tests/test_gpu.py > "$out/big.log" 2>&1
  grep -E "PASSED|FAILED|SKIPPED|ERROR" "$out/big.log" | sed 's/ *\[.*//' | tail -12
  tail -n 1 "$out/big.log"
}

# ab_against_old NAME BENCH-OPTIONS...: softmax_ab.py, build/old's install (/tmp/oldsite) against this
# one, the table shown.
ab_against_old() {
  local name=$1
  shift
  timeout 150 python3 benchmarks/softmax_ab.py --var PYTHONPATH --versions /tmp/oldsite "" "$@" \
    --out "$out/$name" > "$out/$name.log" 2>&1
  grep -h "^|" "$out/$name.log"
}

# ab_rounds NAME SOFTMAX_AB-OPTIONS...: benchmarks/softmax_ab.py once per round of $ROUNDS (default "1 2"),
# into $out/NAME<round> (timeout AB_TIMEOUT, default 200 s), each table shown, then the bulk-copy plans
# the round's log names (under JAX_MEMOPS_SOFTMAX_PLAN_LOG=1).
ab_rounds() {
  local name=$1 round
  shift
  for round in ${ROUNDS:-1 2}; do
    timeout "${AB_TIMEOUT:-200}" python3 benchmarks/softmax_ab.py "$@" --out "$out/$name$round" \
      > "$out/$name$round.log" 2>&1
    grep -h "^|" "$out/$name$round.log"
    grep -h "softmax_fwd plan" "$out/$name$round.log" | sort | uniq | cut -c1-110
  done
  return 0
}

# ab_softmax_final: the softmax figures of README's long-row cells (C = 32768, 50257, 131072; every
# direction, f32 / bf16), one run of the bench, the result lines shown.
ab_softmax_final() {
  timeout 200 python3 -P -m jax_memops.cli bench --ops softmax --dirs fwd bwd fwd+bwd --parts sweep \
    --dtypes float32 bfloat16 --cols 32768 50257 131072 --out "$out/final" > "$out/final.log" 2>&1
  grep -E "^softmax" "$out/final.log"
}

# ab_race_run TOOL PUSH LOG SECONDS [VAR=VALUE...]: compute-sanitizer TOOL over the cluster kernels alone
# (benchmarks/cluster_race.py, kernel filter kns=softmax_) with JAX_MEMOPS_SOFTMAX_PUSH=PUSH and the given environment,
# at most SECONDS, into LOG; the tool's status.
ab_race_run() {
  local tool=$1 push=$2 log=$3 secs=$4
  shift 4
  env "$@" JAX_MEMOPS_SOFTMAX_PUSH="$push" XLA_PYTHON_CLIENT_PREALLOCATE=false \
    XLA_FLAGS=--xla_gpu_enable_command_buffer= timeout "$secs" compute-sanitizer --tool "$tool" \
    --kernel-name kns=softmax_ --error-exitcode 3 python3 benchmarks/cluster_race.py > "$log" 2>&1
}

# ab_cluster_race TAG [VAR=VALUE...]: racecheck (the merge rule, then PUSH=1: messages at every k) and memcheck (the
# rule), one after another (ab_race_run, 150 s each); logs $out/<tool>-TAG-push<rule|1>.log, a line each.
ab_cluster_race() {
  local tag=$1 tool push run log
  shift
  for run in racecheck: racecheck:1 memcheck:; do
    tool=${run%%:*}
    push=${run#*:}
    log=$out/$tool-$tag-push${push:-rule}.log
    ab_race_run "$tool" "$push" "$log" 150 "$@"
    echo "$tool push=${push:-rule} rc=$? $(grep -E 'SUMMARY|OK' "$log" | tail -2 | tr '\n' ' ')"
  done
}

# ab_cluster_race_beside SECONDS [VAR=VALUE...]: ab_cluster_race's three runs at once (each at most SECONDS, beside
# whatever the caller started in the background, which the final wait also waits for), with the plan log; logs
# $out/<tool>-push<rule|1>.log, a line each with the count of plans that drew rows by tickets.
ab_cluster_race_beside() {
  local secs=$1 run push
  shift
  for run in racecheck: racecheck:1 memcheck:; do
    push=${run#*:}
    ab_race_run "${run%%:*}" "$push" "$out/${run%%:*}-push${push:-rule}.log" "$secs" JAX_MEMOPS_SOFTMAX_PLAN_LOG=1 \
      "$@" &
  done
  wait
  for run in racecheck-pushrule racecheck-push1 memcheck-pushrule; do
    echo "$run: $(grep -E 'SUMMARY|OK' "$out/$run.log" | tail -2 | tr '\n' ' ') \
tickets plans: $(grep -c 'tickets$' "$out/$run.log")"
  done
}

# ab_ncu_cases TAG KERNELS CASES...: Nsight Compute over the kernels matching KERNELS (ncu's --kernel-name, e.g.
# "regex:norm_bwd_(lean|fused)") in the ncu_profile.py cases given (op:dir:dtype:C[:ours|xla], one kernel each),
# under this process's environment: the details' key lines, then per kernel its executed instructions per
# element and where its warps wait (ncu_source.py), into $out/TAG*.
ab_ncu_cases() {
  local tag=$1 kernels=$2 n
  shift 2
  XLA_PYTHON_CLIENT_PREALLOCATE=false XLA_PYTHON_CLIENT_ALLOCATOR=platform timeout 150 \
    ncu --profile-from-start off --clock-control none --kernel-name "$kernels" \
    --section SpeedOfLight --section WarpStateStats --section Occupancy --section SourceCounters \
    -f -o "$out/$tag" python3 benchmarks/ncu_profile.py "$@" > "$out/$tag.log" 2>&1
  tail -1 "$out/$tag.log"
  ncu -i "$out/$tag.ncu-rep" --page details > "$out/$tag.txt" 2>&1
  grep -E "^  [a-zA-Z_].*\(|DRAM Throughput|Issue Slots Busy|Warp Cycles Per Issued|Achieved Occupancy|\
Registers Per" "$out/$tag.txt" | cut -c1-120
  for n in $(seq 0 $(($# - 1))); do
    ncu -i "$out/$tag.ncu-rep" --page source --csv --print-source sass --launch-skip "$n" --launch-count 1 \
      > "$out/$tag-src-$n.csv" 2> "$out/$tag-src-$n.err"
  done
  python3 benchmarks/ncu_source.py "$out/$tag"-src-*.csv --top 4 --elements 67108864 | tee "$out/$tag-source.md"
}

# ab_build_beside STAGE: this tree into site-packages while the driver's stage_STAGE (a harness's nvcc build) runs
# beside it; status 1 where the install fails.
ab_build_beside() {
  "stage_$1" &
  ab_build || { wait; return 1; }
  wait
}

# ab_long_rounds VARIANTS CASES SECONDS: /tmp/softmax_long_ab (the driver builds it) over CASES with
# AB_VARIANTS=VARIANTS, once per round of LONG_ROUNDS (default "1 2"), each round its own process of at most SECONDS;
# each round's tables shown.
ab_long_rounds() {
  local round
  for round in ${LONG_ROUNDS:-1 2}; do
    # shellcheck disable=SC2086
    AB_VARIANTS=$1 timeout "$3" /tmp/softmax_long_ab $2 > "$out/softmax_long_ab_r$round.md" 2>&1
    echo "rc=$? (round $round)"
    grep -h "^|\|^\*\*" "$out/softmax_long_ab_r$round.md" | grep -v "^|---" | cut -c1-150
  done
}

# ab_nvcc_harness SRC BIN [SOURCES...]: an in-process A/B harness (benchmarks/SRC, with SOURCES) built for sm_90
# into BIN; on failure the log's tail, status 1.
ab_nvcc_harness() {
  local inc src=$1 exe=$2
  shift 2
  inc=$(python3 -c "import jax.ffi; print(jax.ffi.include_dir())")
  nvcc -std=c++17 -O3 -arch=sm_90 --expt-relaxed-constexpr -I"$inc" -Icpp "benchmarks/$src" "$@" -o "$exe" \
    > "$out/$(basename "$src" .cu)-build.log" 2>&1 || { tail -5 "$out/$(basename "$src" .cu)-build.log"; return 1; }
}

# ab_inproc: benchmarks/norm_fwd_ab.cu (the norms' forward rows against the rule before, inside one process),
# IN_OPS (default all: ln-bf16 rms-bf16 ln-f32 rms-f32), IN_ROUNDS (default "1 2"); each round's table shown.
ab_inproc() {
  ab_nvcc_harness norm_fwd_ab.cu /tmp/norm_fwd_ab || return 1
  for round in ${IN_ROUNDS:-1 2}; do
    # shellcheck disable=SC2086
    timeout 150 /tmp/norm_fwd_ab ${IN_OPS:-} > "$out/norm_fwd_ab_r$round.md" 2>&1
    echo "rc=$?"
    cat "$out/norm_fwd_ab_r$round.md"
  done
}

# ab_norm_fwd_rounds NAME SECONDS MODE...: benchmarks/norm_fwd_ab.cu's MODEs (built with ptxas -v, the log in
# $out/norm_fwd_ab-build.log), IN_ROUNDS (default "1 2") rounds of SECONDS at most, each into $out/NAME_rROUND.md,
# its titles and table rows shown.
ab_norm_fwd_rounds() {
  local name=$1 secs=$2 r
  shift 2
  ab_nvcc_harness norm_fwd_ab.cu /tmp/norm_fwd_ab -Xptxas -v || return 1
  for r in ${IN_ROUNDS:-1 2}; do
    timeout "$secs" /tmp/norm_fwd_ab "$@" > "$out/${name}_r$r.md" 2>&1
    echo "rc=$? (round $r)"
    grep -h "^|\|^\*\*" "$out/${name}_r$r.md" | cut -c1-260
  done
}

# ab_smxab: benchmarks/softmax_fwd_ab.cu (the softmax forward's register rows in other geometries, and
# copies, inside one process) over SMX_CASES (dtype:C ...; default the harness's), its table shown
# ($out/softmax_fwd_ab$SMX_TAG.md).
ab_smxab() {
  ab_nvcc_harness softmax_fwd_ab.cu /tmp/softmax_fwd_ab || return 1
  # shellcheck disable=SC2086
  timeout 200 /tmp/softmax_fwd_ab ${SMX_CASES:-} > "$out/softmax_fwd_ab${SMX_TAG:-}.md" 2>&1
  echo "rc=$?"
  cat "$out/softmax_fwd_ab${SMX_TAG:-}.md"
}

# ab_san_cpu KERNELS OP TAG: ab_sanitize TAG over `sanitize.py --fwd --only OP` (kernels whose names contain
# KERNELS, 280 s), beside the whole suite on the host platform alone (JAX_PLATFORMS=cpu: the CPU handlers under the
# device's jaxlib, $out/cpu-suite.log; ab_sanitize's wait waits for it too); each tool's summary, the suite's last line.
ab_san_cpu() {
  JAX_PLATFORMS=cpu timeout 300 python3 -P -m pytest -q -rfE -n 10 --timeout 280 tests > "$out/cpu-suite.log" 2>&1 &
  SAN_ARGS=--fwd ab_sanitize "$3" "kns=$1" 280 "$2"
  tail -n 1 "$out/cpu-suite.log"
}

# ab_version_table TAG: the kernel versions' tables $out/TAG_<i>-<version>.md (benchmarks/partials_ab.py, one process
# each) side by side, case by case: each one's ms and its ms over the first one's; into $out/TAG_ab.md and shown.
ab_version_table() {
  python3 - "$out/$1"_*.md <<'PY' | tee "$out/$1_ab.md"
import sys
def rows(path):
    out = {}
    for line in open(path):
        f = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(f) > 5 and f[3].isdigit():
            out[tuple(f[:4])] = float(f[5])
    return out
runs = [(p.split("/")[-1][:-3], rows(p)) for p in sorted(sys.argv[1:])]
base = runs[0][1]
print("| op | dir | dtype | C | " + " | ".join(f"{n}: ms" for n, _ in runs) + " | "
      + " | ".join(f"{n} / {runs[0][0]}" for n, _ in runs[1:]) + " |")  # ms over the first one's
print("|---" * (4 + 2 * len(runs) - 1) + "|")
for k, ms in base.items():
    t = [r.get(k) for _, r in runs]  # (op, dir, dtype, C) -> ms
    if None in t:
        continue
    print(f"| {' | '.join(k)} | " + " | ".join(f"{v:.4f}" for v in t) + " | "
          + " | ".join(f"{v / ms:.3f}" for v in t[1:]) + " |")
PY
}

# ab_norm_btest VERSIONS WORKERS: test_norm_backward_versions for each of BT_VERSIONS, else VERSIONS ("default":
# the default kernels), on WORKERS pytest workers; $out/btest[-AB_TAG].log, its last line shown.
ab_norm_btest() {
  local t=tests/test_gpu.py::test_norm_backward_versions v ids=() log="$out/btest${AB_TAG:+-$AB_TAG}.log"
  for v in ${BT_VERSIONS-$1}; do ids+=("$t[${v#default}]"); done
  XLA_PYTHON_CLIENT_PREALLOCATE=false timeout 250 python3 -P -m pytest -q -rfE -n "$2" --timeout 240 "${ids[@]}" \
    > "$log" 2>&1
  tail -n 1 "$log"
}

# ab_norm_versions TAG VERSIONS PARTIALS-AB-OPTIONS...: benchmarks/partials_ab.py once per kernel version
# (JAX_MEMOPS_NORM_BWD: each of AB_VERSIONS, else VERSIONS), one process each, into $out/TAG_<i>-<version>.md; then
# ab_version_table TAG.
ab_norm_versions() {
  local tag=$1 versions=$2 v i=0
  shift 2
  for v in ${AB_VERSIONS:-$versions}; do
    i=$((i + 1))
    JAX_MEMOPS_NORM_BWD=$v timeout 200 python3 -P benchmarks/partials_ab.py --variants default default "$@" 2>&1 \
      | grep -vE "^[WI]0000|^WARNING" > "$out/${tag}_$i-$v.md"
    echo "rc=$? ($v)"
  done
  ab_version_table "$tag"
}

# ab_norm_ptest: the norms' backward tests on the GPU (paired blocks, determinism, partials, tests/test_norms.py's
# gradients), $out/ptest.log.
ab_norm_ptest() {
  ab_gpu_tests ptest 300 "paired_blocks or backward_deterministic or backward_partials or (test_norms and grad)" 280
}

# ab_norm_sanr TAG: ab_sanitize_resume's memcheck and racecheck side by side over the norms' backward kernels (150 s
# per try).
ab_norm_sanr() {
  ab_sanitize_resume memcheck "$1" kns=norm_bwd 150 --only layer_norm rms_norm &
  ab_sanitize_resume racecheck "$1" kns=norm_bwd 150 --only layer_norm rms_norm
  wait
}

# ab_norm_verify: the driver's stage_btest then stage_big, beside its stage_ptest and stage_sanr (the norm drivers'
# verify stage since v35).
ab_norm_verify() {
  { stage_btest; stage_big; } &
  stage_ptest &
  stage_sanr
  wait
}

# ab_norm_big: the > 2^31-element LayerNorm and RMSNorm backward tests.
ab_norm_big() { ab_big_tests "big_layer_norm_backward or big_norm_backward_teams"; }

# ab_norm_nver VERSION: a norm backward version's checks before it becomes the default: the versions tests (default,
# VERSION), the > 2^31-element tests, memcheck and racecheck, each under VERSION.
ab_norm_nver() {
  BT_VERSIONS="default $1" ab_norm_btest "default $1" 4
  JAX_MEMOPS_NORM_BWD=$1 ab_norm_big
  JAX_MEMOPS_NORM_BWD=$1 ab_norm_sanr "$1"
}

# ab_norm_nbench: the bench's LayerNorm and RMSNorm backward and forward + backward, f32 and bf16, device timing.
ab_norm_nbench() { ab_dbench nbench-device device --ops layer_norm rms_norm --dirs bwd fwd+bwd --parts sweep; }

# ab_bwd_vtest VERSION BIG-COLS [TEST]: a softmax backward version's checks: TEST (its plan test, fresh processes) when
# given; under JAX_MEMOPS_SOFTMAX_BWD=VERSION in process the backward's size classes and many rows, and the
# > 2^31-element size-class test at BIG-COLS.
ab_bwd_vtest() {
  [ -z "${3:-}" ] || ab_gpu_tests vtest 200 "$3" 190
  JAX_MEMOPS_SOFTMAX_BWD=$1 ab_gpu_tests vtest-inproc 200 \
    "gpu and softmax and (auto_size_classes_backward or auto_many_rows)" 190
  JAX_MEMOPS_SOFTMAX_BWD=$1 ab_big_tests "big_softmax_size_class and $2"
}

# ab_full SECONDS PATTERN: the whole bench with device timing into $out/full (README's table, plots and ladder), its
# result lines matching PATTERN (grep -E) shown.
ab_full() {
  mkdir -p "$out/full"
  XLA_PYTHON_CLIENT_PREALLOCATE=false timeout "$1" python3 -P -m jax_memops.cli bench --timing device --out "$out/full" \
    > "$out/full/bench_full_device.txt" 2> "$out/full/bench_stderr.txt"
  echo "rc=$? (full)"
  grep -E "$2" "$out/full/bench_full_device.txt"
}
