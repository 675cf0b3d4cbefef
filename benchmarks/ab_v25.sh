#!/usr/bin/env bash
# The v25 device calls.
#   build    this tree (sm_90).
#   smxab    ab_smxab (benchmarks/softmax_fwd_ab.cu) over SMX_CASES (default bf16:128 bf16:64): the 16-bit short rows
#            at 1 or 2 packs per thread and >= 6 / 8 blocks of 256 per SM (XLA's 32 bytes per thread at 100%
#            occupancy) against the rule (v23's 64 registers) and v24's 4 packs at >= 6 blocks.
#   inproc   ab_inproc (benchmarks/norm_fwd_ab.cu) over IN_OPS (default ln-bf16 ln-f32), IN_ROUNDS (default "1 2"):
#            LayerNorm's lean rows with the statistics by one merge of (count, mean, M2) partials against two
#            reductions (the first call's IN_OPS="ln-bf16 rms-bf16": the lean rows at >= 4 team blocks per SM, 64
#            registers, against the default's 3).
#   san      compute-sanitizer memcheck and racecheck over the softmax forward's register rows (sanitize.py --fwd
#            --only softmax, kernels softmax_fwd_regs: v24's bounded 16-bit rows among them), beside the whole
#            suite on the host platform (JAX_PLATFORMS=cpu: v24's vectorized CPU handlers under the device's jaxlib).
#   verify   the GPU tests of v25's kernels: the norms' forward versions (v25's merged LayerNorm statistics by default,
#            v24, v21; large mean, NaN / constant rows, poisoned outputs), the softmax forward's size classes (C = 64 /
#            65 added) and versions v23 / v24, stale and poisoned outputs; beside them compute-sanitizer memcheck and
#            racecheck over the forward kernels of sanitize.py's layer_norm (norm_fwd_lean) and softmax
#            (softmax_fwd_regs; racecheck resumed past the cluster check it stops at: --from 41).
#   pivot    ab_inproc over IN_OPS (default ln-bf16 ln-f32), rounds "1 2": LayerNorm's lean rows with pass 2 about the
#            mean of the row's first pack (one reduction, no pass 1; norm_fwd_lean.cuh kPivot) against the default.
#   shift    RowIter's row group by shifts (softmax_rows.cuh, this tree) against the division (old_cpp/: cpp/ of
#            45fcaee, `git archive 45fcaee cpp | tar x -C old_cpp --strip-components=1` before the call; not committed): benchmarks/softmax_fwd_ab.cu built against each, Nsight Compute over the
#            first register-row launches of each (duration, instructions), then both run alternately, two rounds,
#            over SMX_CASES (default bf16:128 f32:128).
#   final    as landed (RowIter by shifts; v25's 16-bit C <= 64 rows, v26's rows that fill 2 packs; the norms as
#            v24): the GPU tests of every
#            non-cluster softmax kernel (size classes forward and backward, many rows, stale / poisoned outputs, the
#            forward versions v2*, the backward versions, both grids, the L2 rule), then the > 2^31-element size
#            classes; beside them compute-sanitizer: memcheck over sanitize.py's softmax (forward and backward),
#            racecheck over its forward (softmax_fwd_regs) and backward rows (softmax_bwd_rows); then the bench's
#            softmax forward sweep (f32, bf16 at C = 64 .. 1024), one process.
#   lean     ab_smxab over SMX_CASES (default bf16:128 bf16:64 bf16:256 f32:128): softmax_fwd_lean.cuh's rows (whole
#            packs, one row group per thread: 32 registers at >= 8 blocks of 256 per SM without a spill; on branch
#            v25-lean, whose harness has them) against the rule and v25's rows (the 4-pack rows at >= 6 blocks, the
#            2-pack rows of 128-thread blocks).
#   short2   ab_smxab twice over SMX_CASES (default bf16:128 bf16:96 f32:128 f32:64): after the shifts, are the 2-pack
#            rows (bf16 of 128-thread blocks at >= 8 per SM, f32 at >= 6 of 256) faster than the 4-pack rows at C = 128
#            too (the lean stage's round: bf16 +2.7%, f32 +3%)?
#   bench    the bench's bf16 forward: softmax at C = 64, 128 and the norms' sweep, one process each; result lines.
set -uo pipefail
source "$(dirname "$0")/ab_lib.sh"

stage_build() { ab_build || exit 1; }

stage_smxab() { SMX_CASES=${SMX_CASES:-bf16:128 bf16:64} ab_smxab; }

stage_inproc() { IN_OPS=${IN_OPS:-ln-bf16 ln-f32} IN_ROUNDS=${IN_ROUNDS:-1 2} ab_inproc; }

stage_san() { ab_san_cpu softmax_fwd_regs softmax softmax; }

stage_verify() {
  local san="XLA_PYTHON_CLIENT_PREALLOCATE=false XLA_FLAGS=--xla_gpu_enable_command_buffer= timeout 280"
  eval "$san compute-sanitizer --tool memcheck --kernel-name kns=norm_fwd_lean --error-exitcode 3 \
    python3 benchmarks/sanitize.py --fwd --only layer_norm > $out/memcheck-ln.log 2>&1 &"
  eval "$san compute-sanitizer --tool racecheck --kernel-name kns=norm_fwd_lean --error-exitcode 3 \
    python3 benchmarks/sanitize.py --fwd --only layer_norm > $out/racecheck-ln.log 2>&1 &"
  eval "$san compute-sanitizer --tool memcheck --kernel-name kns=softmax_fwd_regs --error-exitcode 3 \
    python3 benchmarks/sanitize.py --fwd --only softmax > $out/memcheck-softmax.log 2>&1 &"
  eval "($san compute-sanitizer --tool racecheck --kernel-name kns=softmax_fwd_regs --error-exitcode 3 \
    python3 benchmarks/sanitize.py --fwd --only softmax; $san compute-sanitizer --tool racecheck \
    --kernel-name kns=softmax_fwd_regs --error-exitcode 3 python3 benchmarks/sanitize.py --fwd --from 41 \
    --only softmax) > $out/racecheck-softmax.log 2>&1 &"
  ab_gpu_tests gpu-tests 260 "norm_forward_versions or (gpu_fwd_versions and (v23 or v24)) or \
(gpu and softmax and (auto_size_classes_forward or stale_and_poisoned))" 250
  wait
  local log
  for log in memcheck-ln racecheck-ln memcheck-softmax racecheck-softmax; do
    echo "$log: $(grep -E 'SUMMARY|checks passed|Internal' "$out/$log.log" | tr '\n' ' ')"
  done
}

stage_lean() { SMX_CASES=${SMX_CASES:-bf16:128 bf16:64 bf16:256 f32:128} SMX_TAG=_lean ab_smxab; }

stage_short2() {
  local round
  for round in 1 2; do
    SMX_CASES=${SMX_CASES:-bf16:128 bf16:96 f32:128 f32:64} SMX_TAG=_short2_r$round ab_smxab | \
      grep -E "^\*\*|^\| (rule|rule again \(A/A\)|rule, >= 6 blocks per SM|2 packs.*|copy.*) \|"
  done
}

stage_pivot() { IN_OPS=${IN_OPS:-ln-bf16 ln-f32} IN_ROUNDS="1 2" ab_inproc; }

stage_shift() {
  local inc tag round
  inc=$(python3 -c "import jax.ffi; print(jax.ffi.include_dir())")
  for tag in old new; do
    nvcc -std=c++17 -O3 -arch=sm_90 --expt-relaxed-constexpr -I"$inc" "-I$([ $tag = old ] && echo old_cpp || echo cpp)" \
      benchmarks/softmax_fwd_ab.cu -o "/tmp/smx_$tag" > "$out/smx_$tag-build.log" 2>&1 || { tail -5 "$out/smx_$tag-build.log"; return 1; }
    timeout 120 ncu --clock-control none --kernel-name regex:softmax_fwd_regs --launch-count 8 \
      --metrics gpu__time_duration.sum,smsp__inst_executed.sum,launch__registers_per_thread,launch__block_size \
      "/tmp/smx_$tag" bf16:128 > "$out/ncu_shift_$tag.txt" 2>&1
    echo "== ncu $tag"
    grep -E "softmax_fwd_regs|duration|inst_executed|registers|block_size" "$out/ncu_shift_$tag.txt" | \
      sed -E 's/.*softmax_fwd_regs_kernel<([^>]*)>.*/  kernel <\1>/' | head -40
  done
  for round in 1 2; do
    for tag in old new; do
      # shellcheck disable=SC2086
      timeout 100 "/tmp/smx_$tag" ${SMX_CASES:-bf16:128 f32:128} > "$out/smx_shift_${tag}_r$round.md" 2>&1
      echo "== $tag round $round"
      grep -E "^\*\*|^\| (rule|rule, >= 6 blocks per SM|copy: 4 words per thread, plain|copy: 1 word per thread, plain) \|" \
        "$out/smx_shift_${tag}_r$round.md"
    done
  done
}

stage_final() {
  local san="XLA_PYTHON_CLIENT_PREALLOCATE=false XLA_FLAGS=--xla_gpu_enable_command_buffer= timeout 300"
  eval "$san compute-sanitizer --tool memcheck --kernel-name kns=softmax --error-exitcode 3 \
    python3 benchmarks/sanitize.py --only softmax > $out/memcheck-softmax.log 2>&1 &"
  eval "$san compute-sanitizer --tool racecheck --kernel-name kns=softmax_fwd_regs --error-exitcode 3 \
    python3 benchmarks/sanitize.py --fwd --only softmax > $out/racecheck-fwd.log 2>&1 &"
  eval "$san compute-sanitizer --tool racecheck --kernel-name kns=softmax_bwd_rows --error-exitcode 3 \
    python3 benchmarks/sanitize.py --only softmax > $out/racecheck-bwd.log 2>&1 &"
  ab_gpu_tests gpu-tests 240 "(gpu and softmax and (auto_size_classes or stale_and_poisoned or auto_many_rows)) or \
(gpu_fwd_versions and v2) or gpu_grid or gpu_bwd_versions or gpu_fwd_l2_rule" 230
  wait
  local log
  for log in memcheck-softmax racecheck-fwd racecheck-bwd; do
    echo "$log: $(grep -cE '^\[' "$out/$log.log") checks run; $(grep -E 'SUMMARY|checks passed|Internal|Invalid|hazard' \
      "$out/$log.log" | sort | uniq -c | tr '\n' ' ')"
  done
  XLA_PYTHON_CLIENT_PREALLOCATE=false timeout 150 python3 -P -m pytest -v -rfEs --timeout 140 \
    -k "big_softmax_size_class" tests/test_gpu.py > "$out/big.log" 2>&1
  grep -E "PASSED|FAILED|SKIPPED|ERROR" "$out/big.log" | sed 's/ *\[.*//' | tail -4
  timeout 90 python3 -P -m jax_memops.cli bench --ops softmax --dirs fwd --parts sweep --dtypes float32 bfloat16 \
    --cols 64 128 512 1024 --out "$out/sweep-smx" > "$out/sweep-smx.log" 2>&1
  grep -E "^softmax" "$out/sweep-smx.log"
}

stage_bench() {
  timeout 60 python3 -P -m jax_memops.cli bench --ops softmax --dirs fwd --parts sweep --dtypes bfloat16 \
    --cols 64 128 --out "$out/sweep-smx" > "$out/sweep-smx.log" 2>&1
  grep -E "^softmax" "$out/sweep-smx.log"
  timeout 150 python3 -P -m jax_memops.cli bench --ops layer_norm rms_norm --dirs fwd --parts sweep \
    --dtypes bfloat16 --out "$out/sweep-norms" > "$out/sweep-norms.log" 2>&1
  grep -E "^(layer|rms)_norm" "$out/sweep-norms.log"
}

ab_init "$@"
ab_run ab-v25
