#!/usr/bin/env bash
# One lease on the GPU machine: build against its jaxlib, then the stages named on the command line
# (default: all). Logs and bench outputs go to ./gpu-out, packed into $OUT/gpu-out.tgz at the end (the
# device tool brings back at most 8 files); a summary table is printed last.
#   build     pip install --no-build-isolation --no-deps . (sm_90 only, to save time)
#   test      the pytest suite (CPU and GPU cases; TESTS_K selects, e.g. "gpu and not slow")
#   slow      the > 2^31-element GPU tests (pytest -k "gpu and slow"), one at a time
#   sanitize  compute-sanitizer memcheck and racecheck over benchmarks/sanitize.py
#   race      what the sanitize stage's racecheck never reaches: benchmarks/cluster_race.py, the softmax's cluster
#             kernels (racecheck by the merge rule and by messages at every k, JAX_MEMOPS_SOFTMAX_PUSH=1;
#             memcheck), and sanitize.py's workload but softmax (racecheck: the norms' and GELU's backward)
#   bench     jax-memops bench (default: every part) into gpu-out/bench
#   gpt       examples/gpt.py --compare (jm ops vs plain Flax, same init and data) into gpu-out/gpt
#   multi     benchmarks/multi_gpu.py (row-sharded ops on every GPU vs one; needs 2 or more GPUs)
#   attn      benchmarks/attention_ab.py (the Flax drop-in attention functions against Flax's own; Flax's version)
#   layers    benchmarks/norm_layers_ab.py (the Flax drop-in norm layers against Flax's own, device timing; on the
#             H100 each case took 50-65 s, 4-6 programs compiled and timed, so its 24 default cases outlast a call:
#             choose with LAYERS_ARGS, e.g. "--configs widening --cols 1024")
# Environment: TESTS_K (pytest -k expression, e.g. gpu), PYTEST_N (pytest-xdist workers; they share the GPU,
# so preallocation is turned off for the test stage), DURATIONS (how many of the slowest tests pytest lists;
# default 40), BENCH_ARGS (extra bench options), GPT_STEPS, ATTN_ARGS (attention_ab.py options), LAYERS_ARGS
# (norm_layers_ab.py options), T_TEST / T_SAN / T_RACE / T_BENCH / T_GPT / T_MULTI / T_ATTN / T_LAYERS (seconds each
# stage may take; a stage past its limit is stopped and noted).
set -uo pipefail
out=gpu-out
rm -rf "$out" && mkdir -p "$out"
trap '[ -n "${OUT:-}" ] && tar czf "$OUT/gpu-out.tgz" "$out"' EXIT
stages=${*:-build test sanitize bench}
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=${XLA_PYTHON_CLIENT_PREALLOCATE:-true}
summary=()
note() { summary+=("$(printf '%-9s %s' "$1" "$2")"); }

for stage in $stages; do
  start=$SECONDS
  case $stage in
    build)
      nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader > "$out/gpu.txt"
      JAX_MEMOPS_CUDA=ON JAX_MEMOPS_CUDA_ARCHS=90 python3 -m pip install --no-build-isolation --no-deps -v . \
        > "$out/build.log" 2>&1
      rc=$?; note build "rc=$rc $((SECONDS - start))s $(cat "$out/gpu.txt")"
      [ $rc -eq 0 ] || { tail -40 "$out/build.log"; break; }
      python3 -P -m jax_memops.cli info | tee "$out/info.txt" ;;
    test)
      # -v: each result is logged as it happens; the stage's limit interrupts pytest (SIGINT, then KILL 20 s
      # later) so a run cut off still prints its summary and the slowest tests (--durations); --timeout
      # (pytest-timeout): a hung test fails alone.
      XLA_PYTHON_CLIENT_PREALLOCATE=false timeout -s INT -k 20 ${T_TEST:-1200} python3 -P -m pytest -v -rfEs \
        --durations=${DURATIONS:-40} --timeout=${TEST_TIMEOUT:-300} ${PYTEST_N:+-n $PYTEST_N} \
        ${TESTS_K:+-k "$TESTS_K"} tests > "$out/pytest.log" 2>&1
      rc=$?; note test "rc=$rc $((SECONDS - start))s $(tail -1 "$out/pytest.log")"
      [ $rc -eq 0 ] || grep -E "(FAILED|ERROR)( |$)" "$out/pytest.log" | grep -v "^E " | head -30 ;;
    slow)
      # The > 2^31-element tests, one at a time (each holds several GB on the host and the GPU; side by
      # side under xdist they can exhaust host memory).
      XLA_PYTHON_CLIENT_PREALLOCATE=false timeout -s INT -k 20 ${T_SLOW:-1200} python3 -P -m pytest -v -rfEs \
        --durations=${DURATIONS:-40} --timeout=${TEST_TIMEOUT:-300} -k "gpu and slow" tests > "$out/pytest_slow.log" 2>&1
      rc=$?; note slow "rc=$rc $((SECONDS - start))s $(tail -1 "$out/pytest_slow.log")"
      [ $rc -eq 0 ] || grep -E "(FAILED|ERROR)( |$)" "$out/pytest_slow.log" | grep -v "^E " | head -30 ;;
    sanitize)
      # Seen on the H200 with jax 0.11.2: compute-sanitizer crashes (SIGSEGV) when XLA records kernels
      # into CUDA graphs (command buffers), so they are turned off; both also crash (SIGSEGV) while
      # instrumenting XLA's own kernels (racecheck since the first run, memcheck since jax_memops' softmax
      # classes joined the workload), so both are limited to ours: every kernel name ends in _kernel.
      # The two tools run side by side (one GPU is plenty for these small shapes).
      # Then the A/B kernels (their versions are read from the environment once per process): the
      # same tools over sanitize.py --ab under JAX_MEMOPS_SOFTMAX_FWD=v5-reg JAX_MEMOPS_NORM_FWD=v4. racecheck
      # stops at the first backward on a thread-block cluster ("Internal Sanitizer Error", softmax f32
      # 2 x 12288), so it also runs over the forward alone (sanitize.py --fwd) for the kernels after it.
      for tool in memcheck racecheck; do
        filter=(--kernel-name kns=_kernel)
        ( XLA_PYTHON_CLIENT_PREALLOCATE=false XLA_FLAGS=--xla_gpu_enable_command_buffer= \
            timeout ${T_SAN:-600} compute-sanitizer --tool $tool "${filter[@]}" --error-exitcode 3 \
            python3 benchmarks/sanitize.py > "$out/$tool.log" 2>&1; echo $? > "$out/$tool.rc"
          JAX_MEMOPS_SOFTMAX_FWD=v5-reg JAX_MEMOPS_NORM_FWD=v4 XLA_PYTHON_CLIENT_PREALLOCATE=false \
            XLA_FLAGS=--xla_gpu_enable_command_buffer= \
            timeout ${T_SAN:-600} compute-sanitizer --tool $tool "${filter[@]}" --error-exitcode 3 \
            python3 benchmarks/sanitize.py --ab > "$out/$tool-ab.log" 2>&1; echo $? > "$out/$tool-ab.rc"
          [ $tool = memcheck ] && exit 0
          XLA_PYTHON_CLIENT_PREALLOCATE=false XLA_FLAGS=--xla_gpu_enable_command_buffer= \
            timeout ${T_SAN:-600} compute-sanitizer --tool $tool "${filter[@]}" --error-exitcode 3 \
            python3 benchmarks/sanitize.py --fwd > "$out/$tool-fwd.log" 2>&1; echo $? > "$out/$tool-fwd.rc" ) &
      done
      wait
      for tool in memcheck racecheck memcheck-ab racecheck-ab racecheck-fwd; do
        note $tool "rc=$(cat "$out/$tool.rc") $((SECONDS - start))s $(grep -E 'SUMMARY|passed|FAIL' "$out/$tool.log" | tail -2 | tr '\n' ' ')"
      done ;;
    race)
      # sanitize.py's racecheck dies of the tool's own "Internal Sanitizer Error" at the first backward on a cluster;
      # under a filter on the softmax's kernels (kns=softmax_) the tool gets through them (ab_lib.sh's
      # ab_cluster_race, run by the A/B drivers since v11). The three runs side by side.
      for run in racecheck: racecheck:1 memcheck:; do
        tool=${run%%:*} push=${run#*:}
        ( JAX_MEMOPS_SOFTMAX_PUSH="$push" XLA_PYTHON_CLIENT_PREALLOCATE=false \
            XLA_FLAGS=--xla_gpu_enable_command_buffer= timeout ${T_RACE:-300} compute-sanitizer --tool $tool \
            --kernel-name kns=softmax_ --error-exitcode 3 python3 benchmarks/cluster_race.py \
            > "$out/race-$tool-push${push:-rule}.log" 2>&1; echo $? > "$out/race-$tool-push${push:-rule}.rc" ) &
      done
      wait
      # The whole workload's racecheck stops at the softmax's first cluster backward: the other ops' kernels, forward
      # and backward, by themselves, after the three above (run beside them on the H100, racecheck itself died of a
      # segmentation fault at its seventh check; alone, its dtype checks ran clean: RESULTS.md "v57").
      ( XLA_PYTHON_CLIENT_PREALLOCATE=false XLA_FLAGS=--xla_gpu_enable_command_buffer= timeout ${T_RACE:-300} \
          compute-sanitizer --tool racecheck --kernel-name kns=_kernel --error-exitcode 3 python3 benchmarks/sanitize.py \
          --only layer_norm layer_norm_noparams layer_norm_scale rms_norm layer_norm_dtype rms_norm_dtype gelu_arrays \
          gelu_3_kernels gelu_scalars \
          > "$out/race-racecheck-others.log" 2>&1; echo $? > "$out/race-racecheck-others.rc" ) &
      wait
      for log in racecheck-pushrule racecheck-push1 memcheck-pushrule racecheck-others; do
        note "${log%-*}" "rc=$(cat "$out/race-$log.rc") ${log##*-} $((SECONDS - start))s $(grep -E 'SUMMARY|OK|passed' "$out/race-$log.log" | tail -2 | tr '\n' ' ')"
      done ;;
    bench)
      timeout ${T_BENCH:-1200} python3 -P -m jax_memops.cli bench ${BENCH_ARGS:-} --out "$out/bench" > "$out/bench.txt" 2> "$out/bench.err"
      rc=$?; note bench "rc=$rc $((SECONDS - start))s"
      cat "$out/bench.txt"; [ $rc -eq 0 ] || tail -20 "$out/bench.err" ;;
    gpt)
      timeout ${T_GPT:-600} python3 -P examples/gpt.py --compare --steps ${GPT_STEPS:-300} --out "$out/gpt" \
        > "$out/gpt.log" 2>&1
      rc=$?; note gpt "rc=$rc $((SECONDS - start))s $(tail -1 "$out/gpt.log")"
      [ $rc -eq 0 ] || tail -20 "$out/gpt.log" ;;
    multi)
      timeout ${T_MULTI:-600} python3 -P benchmarks/multi_gpu.py --out "$out/multi" > "$out/multi.log" 2>&1
      rc=$?; note multi "rc=$rc $((SECONDS - start))s"
      tail -12 "$out/multi.log" ;;
    attn)
      timeout ${T_ATTN:-300} python3 -P benchmarks/attention_ab.py ${ATTN_ARGS:-} > "$out/attention.log" 2>&1
      rc=$?; note attn "rc=$rc $((SECONDS - start))s $(head -1 "$out/attention.log")"
      cat "$out/attention.log" ;;
    layers)
      timeout ${T_LAYERS:-600} python3 -P benchmarks/norm_layers_ab.py --timing device ${LAYERS_ARGS:-} \
        > "$out/norm_layers.log" 2>&1
      rc=$?; note layers "rc=$rc $((SECONDS - start))s $(head -1 "$out/norm_layers.log")"
      cat "$out/norm_layers.log" ;;
  esac
done
echo; echo "== summary"; printf '%s\n' "${summary[@]}"
