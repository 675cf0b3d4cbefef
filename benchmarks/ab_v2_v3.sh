#!/usr/bin/env bash
# A/B of the norms/GELU v3 kernels (this tree) against v2 (commit aac9416) in one GPU lease.
# Run from a checkout that holds the v2 sources in ab-v2/ (untracked, so it travels to the
# device machine), made beforehand on a machine with the git history:
#   git archive aac9416 | (mkdir -p ab-v2 && tar -x -C ab-v2)
# Then on the GPU, two calls of <= 10 min on a warm machine (the builds stay in /tmp/site-v2|v3):
#   bash benchmarks/ab_v2_v3.sh build bench      # both builds (sm_90), then the benches
#   bash benchmarks/ab_v2_v3.sh test sanitize    # v3: GPU tests of the changed kernels, memcheck/racecheck
# Stages (default: all): build; bench (norms at the issue's row lengths, GELU at its grid, v2 then v3
# per op group); test; sanitize. Logs and bench outputs under $OUT (else ./ab-out).
set -uo pipefail
root=$PWD
out=${OUT:-$root/ab-out}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
build() {  # $1 = v2|v3: into /tmp/site-$1 (kept while the machine stays warm; rebuilt when missing)
  local v=$1 src=$root
  [ $v = v2 ] && src=$root/ab-v2
  [ -d /tmp/site-$v/jax_memops ] && return 0
  (cd "$src" && JAX_MEMOPS_CUDA=ON JAX_MEMOPS_CUDA_ARCHS=90 timeout 300 python3 -m pip install -q \
    --no-build-isolation --no-deps --target /tmp/site-$v .) > "$out/build-$v.log" 2>&1
  local rc=$?; echo "build $v rc=$rc"; [ $rc -eq 0 ] || tail -30 "$out/build-$v.log"; return $rc
}
bench() {  # $1 = v2|v3, $2 = tag, rest: bench options; the tables go to stdout
  local v=$1 tag=$2; shift 2
  (cd /tmp && PYTHONPATH=/tmp/site-$v timeout 240 python3 -P -m jax_memops.cli bench --parts sweep --reps 5 \
    --out "$out/bench-$tag-$v" "$@" > "$out/bench-$tag-$v.txt" 2> "$out/bench-$tag-$v.err")
  echo "== bench $tag $v rc=$?"; grep -E "layer_norm|rms_norm|gelu" "$out/bench-$tag-$v.txt" | head -80
}
for stage in ${*:-build bench test sanitize}; do
  case $stage in
    build) build v2 && build v3 || exit 1 ;;
    bench)  # v2 then v3 per op group, so both see the same machine state
      for v in v2 v3; do bench $v norms --ops layer_norm rms_norm --cols 768 1024 2048 4096 8192 12288; done
      for v in v2 v3; do bench $v gelu --ops gelu; done ;;
    test)
      build v3 || exit 1
      (cd /tmp && PYTHONPATH=/tmp/site-v3 XLA_PYTHON_CLIENT_PREALLOCATE=false timeout 420 python3 -P -m pytest -q -rfE \
        -k "gpu and not slow" "$root/tests/test_gpu.py" "$root/tests/test_gelu.py" "$root/tests/test_norms.py" \
        > "$out/pytest-v3.log" 2>&1)
      echo "pytest v3 rc=$? $(tail -1 "$out/pytest-v3.log")"; grep -E "^(FAILED|ERROR)" "$out/pytest-v3.log" | head -20 ;;
    sanitize)  # as benchmarks/gpu_check.sh: no command buffers, our kernels only, the two tools side by side
      build v3 || exit 1
      for tool in memcheck racecheck; do
        (cd /tmp && PYTHONPATH=/tmp/site-v3 XLA_PYTHON_CLIENT_PREALLOCATE=false XLA_FLAGS=--xla_gpu_enable_command_buffer= \
          timeout 400 compute-sanitizer --tool $tool --kernel-name kns=_kernel --error-exitcode 3 \
          python3 -P "$root/benchmarks/sanitize.py" > "$out/sanitize-$tool.log" 2>&1; echo $? > "$out/sanitize-$tool.rc") &
      done
      wait
      for tool in memcheck racecheck; do
        echo "$tool rc=$(cat "$out/sanitize-$tool.rc") $(grep -E 'SUMMARY|passed|FAIL' "$out/sanitize-$tool.log" | tail -2 | tr '\n' ' ')"
      done ;;
  esac
done
