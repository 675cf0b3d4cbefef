#!/usr/bin/env bash
# The v28 device calls.
#   build    this tree (sm_90).
#   params   ab_inproc over IN_OPS=ln-params (benchmarks/norm_fwd_ab.cu), rounds "p1 p2": bf16 LayerNorm's lean rows
#            with scale and bias (twice: A/A), scale only, neither, and RMSNorm's (scale) in one rotation — what
#            LayerNorm's parameter loads cost, and the lean rows for bias-free / parameter-free LayerNorms (v28) against
#            v21's rows, which took them before (added after the first call).
#   smx      the bench's softmax forward, f32 and bf16 at C = 128, 256, 512, 1024, one process (v27's C = 256 rows
#            had not been benched).
#   verify   the GPU tests of the norms' forward classes (absent parameters: each lean instance) and of the softmax
#            forward (size classes, stale / poisoned outputs, versions v2*: v27's C = 256 rows); beside them
#            compute-sanitizer memcheck and racecheck over the softmax forward's register rows (sanitize.py --fwd
#            --only softmax: the short rows of C = 256 among them) and the norms' lean forward (layer_norm, its
#            scale-only and parameter-free forms, rms_norm), and the whole suite on the host platform
#            (JAX_PLATFORMS=cpu: last session's branch-free f16 conversions under the device's jaxlib).
#   loads    (calls 2 and 3; its harness mode is gone) the lean kernel's options then, kLoads: x not allocated in L1,
#            the parameters evict_last in L1 (call 2), the first pack's parameters early, team rows' parameters staged
#            in shared memory (call 3), against its default, bf16 LayerNorm.
#   early    ab_inproc over IN_OPS=early, rounds "e1 e2": v28's team rows' parameters staged in shared memory
#            (kStaged; call 4: also block rows' first pack's parameters loaded beside x, dropped) against v23's loads
#            in pass 3, bf16 LayerNorm and RMSNorm.
#   plan     the v3 / v4 norm kernels' parameter plan for rows with one parameter absent (16-byte loads, kVector): ptxas
#            spills 4-8 more bytes in 16-bit LayerNorm team rows; does their dense path slow? norm_fwd_ab.cu's ln-bf16
#            (v21's rows = those kernels) built from old_v28/ (HEAD's cpp/ and harness, `git archive HEAD cpp
#            benchmarks/norm_fwd_ab.cu benchmarks/inproc_ab.cuh | tar x -C old_v28`; not committed) and from this tree,
#            alternately, two rounds.
#   ncu      Nsight Compute over the lean rows of `norm_fwd_ab ln-params` (scale + bias twice, scale only, neither,
#            RMSNorm) at C = 1024 and 12288: time, DRAM and L2 bytes, L1 hits, instructions, stalls.
#   smx256   ab_smxab over bf16:256 bf16:128 (the bench read v27's bf16 C = 256 rows at 0.93x XLA, 91% of its copy).
#   smxproc  benchmarks/softmax_ab.py: the bench's bf16 softmax forward at C = 128, 256 under
#            JAX_MEMOPS_SOFTMAX_FWD=v26 (the rule before v27) and the default, one process each, two rounds.
#   nverify  as landed (team rows' parameters staged; absent parameters on the lean rows; v3 / v4's kVector plan): the
#            norms' forward GPU tests (size classes with absent parameters, the versions v3, v4, v21, v23 and the
#            default under both grids, row groups, large mean) beside compute-sanitizer memcheck and racecheck over
#            every norm forward kernel (sanitize.py --fwd: layer_norm, its scale-only and parameter-free forms,
#            rms_norm).
#   nbench   the bench's LayerNorm and RMSNorm forward sweep, f32 and bf16, one process.
#   group    (branch v28-group, whose harness and kernel have its option) ab_inproc over IN_OPS=group, rounds "g1 g2":
#            LayerNorm's block rows grouped kR = 2, 4, 8 to a block, their parameters staged in dynamic shared memory,
#            against the default (bf16: the lean rows one per block; f32: v4's rows), bf16 C = 4096, 8192, 12288 and
#            f32 2048, 4096.
#   final    the final tree: the bench's LayerNorm and RMSNorm forward (a second process) and forward + backward,
#            f32 and bf16, one process each.
#   big      the > 2^31-element forwards: softmax size classes, LayerNorm, RMSNorm, the norms' team rows.
set -uo pipefail
source "$(dirname "$0")/ab_lib.sh"

stage_build() { ab_build || exit 1; }

stage_params() { IN_OPS=${IN_OPS:-ln-params} IN_ROUNDS=${IN_ROUNDS:-p1 p2} ab_inproc; }

stage_smx() {
  timeout 100 python3 -P -m jax_memops.cli bench --ops softmax --dirs fwd --parts sweep --dtypes float32 bfloat16 \
    --cols 128 256 512 1024 --out "$out/sweep-smx" > "$out/sweep-smx.log" 2>&1
  grep -E "^softmax" "$out/sweep-smx.log"
}

stage_verify() {
  JAX_PLATFORMS=cpu timeout 290 python3 -P -m pytest -q -rfE -n 6 --timeout 280 tests > "$out/cpu-suite.log" 2>&1 &
  SAN_ARGS=--fwd ab_sanitize norms kns=norm_fwd_lean 270 layer_norm layer_norm_scale layer_norm_noparams rms_norm &
  SAN_ARGS=--fwd ab_sanitize softmax kns=softmax_fwd_regs 270 softmax &
  ab_gpu_tests gpu-tests 280 "norm_forward_classes or (gpu and softmax and (auto_size_classes_forward or \
stale_and_poisoned)) or (gpu_fwd_versions and v2)" 270
  wait
  local log
  for log in memcheck-norms racecheck-norms memcheck-softmax racecheck-softmax; do
    echo "$log: $(grep -cE '^\[' "$out/$log.log") checks run; $(grep -E 'SUMMARY|checks passed|Internal' \
      "$out/$log.log" | sort | uniq -c | tr '\n' ' ')"
  done
  echo "cpu suite: $(tail -n 1 "$out/cpu-suite.log")"
}

stage_early() { IN_OPS=${IN_OPS:-early} IN_ROUNDS=${IN_ROUNDS:-e1 e2} ab_inproc; }

stage_plan() {
  local inc tag round
  inc=$(python3 -c "import jax.ffi; print(jax.ffi.include_dir())")
  for tag in old new; do
    local root=.
    [ $tag = old ] && root=old_v28
    nvcc -std=c++17 -O3 -arch=sm_90 --expt-relaxed-constexpr -I"$inc" -I$root/cpp $root/benchmarks/norm_fwd_ab.cu \
      -o "/tmp/nfa_$tag" > "$out/plan_$tag-build.log" 2>&1 || { tail -5 "$out/plan_$tag-build.log"; return 1; }
  done
  for round in 1 2; do
    for tag in old new; do
      timeout 60 "/tmp/nfa_$tag" ln-bf16 > "$out/plan_${tag}_r$round.md" 2>&1
      echo "== $tag round $round (rc $?)"
      grep -E "^\| [0-9]" "$out/plan_${tag}_r$round.md" | cut -d'|' -f2-7
    done
  done
}

stage_ncu() {
  ab_nvcc_harness norm_fwd_ab.cu /tmp/norm_fwd_ab || return 1
  local metrics=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum
  metrics+=,lts__t_sectors_srcunit_tex_op_read.sum
  metrics+=,l1tex__t_sector_pipe_lsu_mem_global_op_ld_hit_rate.pct,l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum
  metrics+=,smsp__inst_executed.sum,sm__warps_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread
  metrics+=,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio
  metrics+=,l1tex__throughput.avg.pct_of_peak_sustained_active,lts__throughput.avg.pct_of_peak_sustained_elapsed
  metrics+=,smsp__issue_active.avg.pct_of_peak_sustained_active
  local skip tag
  # 45 rounds x 5 lean launches per width; C = 1024 is the 2nd width, 12288 the 6th.
  for tag in 1024:235 12288:1135; do
    skip=${tag#*:}
    timeout 150 ncu --clock-control none --kernel-name regex:norm_fwd_lean --launch-skip "$skip" --launch-count 5 \
      --metrics "$metrics" /tmp/norm_fwd_ab ln-params > "$out/ncu_params_${tag%:*}.txt" 2>&1
    echo "== ncu C = ${tag%:*} (rc $?)"
    grep -E "norm_fwd_lean_kernel|duration|dram__|lts__|l1tex__|inst_executed|warps_active|registers|stalled|issue_a" \
      "$out/ncu_params_${tag%:*}.txt" | grep -vE "^==" | sed -E 's/.*norm_fwd_lean_kernel<([^>]*)>.*/  kernel <\1>/' | \
      sed -E 's/  +/ /g' | head -80
  done
}

stage_smx256() { SMX_CASES=${SMX_CASES:-bf16:256 bf16:128} SMX_TAG=_256 ab_smxab; }

stage_smxproc() {
  local round
  local -a versions
  for round in 1 2; do
    if [ $round = 1 ]; then versions=(v26 ""); else versions=("" v26); fi
    timeout 120 python3 benchmarks/softmax_ab.py --out "$out/smxproc_r$round" --versions "${versions[@]}" \
      --dtypes bfloat16 --cols 128 256 > "$out/smxproc_r$round.log" 2>&1
    echo "== round $round (rc $?)"
    tail -n 12 "$out/smxproc_r$round.log"
  done
}

stage_nverify() { ab_norm_fwd_verify; }

stage_nbench() { ab_norm_sweep fwd norms; }

stage_final() {
  stage_nbench
  ab_norm_sweep fwd+bwd norms-fb
}

stage_big() {
  ab_big_tests "big_softmax_size_class or big_layer_norm_forward or \
big_rms_norm_forward or big_norm_team_rows"
}

ab_init "$@"
ab_run ab-v28
