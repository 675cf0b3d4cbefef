#!/usr/bin/env bash
# The v24 device calls: last session's review items (two host-side launch helpers; the cubins are byte-identical
# to v23's), the CPU handlers on the device's jaxlib, and the open in-process questions.
#   build    this tree (sm_90).
#   mesh     jax 0.11's explicit mesh axes (jax.set_mesh) on the host platform: where a partitioned body is
#            traced (probe_mesh.py, a scratch probe: the thread and the mesh in context), then test_sharding.py.
#   verify   the GPU tests of the launches the review touched and of v24's bf16 RMSNorm rows (the norms' forward:
#            size classes, large mean, row groups, every version poisoned; the softmax forward: every version, the
#            size classes, poisoned outputs); then the > 2^31-element tests of the softmax size classes (131072,
#            50257 and v23's 8-pack sub-warp rows at 1000) and of the norms' forward.
#   cpu      compute-sanitizer memcheck and racecheck over the RMSNorm forward's lean rows (sanitize.py --fwd
#            --only rms_norm, kernels norm_fwd_lean) beside the whole suite on the host platform alone
#            (JAX_PLATFORMS=cpu: the CPU handlers and their thread pool under the device's jaxlib).
#   sweep    the bench's sweep for the bf16 norms' forward (RMSNorm on v24's rows), one process; result lines.
#   smxab    ab_smxab (benchmarks/softmax_fwd_ab.cu) over SMX_CASES (default bf16:128 bf16:256 f32:128): can
#            16-bit C = 128 rows on 2 threads of 8 packs, or in XLA's layout (R rows per thread), beat the rule?
#   xla      benchmarks/xla_kernels.py over XLA_CASES (op:dtype:C; default the 16-bit softmax at C = 128 and 256,
#            f32 at 128, bf16 LayerNorm at 1024): the fusions and kernels XLA compiles for the bench's references.
#   ncu      Nsight Compute over one call each of ours and XLA's softmax forward at bf16 C = 128, 256 and f32 128,
#            and the bench's copy: kernel durations in one process, where the bench reads ours at 0.95x XLA.
#   smxv     v24's bounded 16-bit sub-warp rows: the softmax forward's GPU tests (every version with v23, the size
#            classes, special values, poisoned outputs), then the bench's bf16 forward at C = 64 and 128.
#   inproc   ab_inproc (benchmarks/norm_fwd_ab.cu), IN_OPS (default rms-bf16), IN_ROUNDS (default "1 2 3").
set -uo pipefail
source "$(dirname "$0")/ab_lib.sh"

stage_build() { ab_build || exit 1; }

stage_mesh() {
  [ -f probe_mesh.py ] && timeout 60 python3 -P probe_mesh.py 2>&1 | grep -v "_warn_once\|Warning"
  JAX_PLATFORMS=cpu timeout 120 python3 -P -m pytest -q -rfE -n 8 --timeout 100 tests/test_sharding.py \
    > "$out/sharding.log" 2>&1
  tail -n 1 "$out/sharding.log"
}

stage_verify() {
  ab_gpu_tests gpu-tests 330 "(gpu and norm and not slow and not big and not backward) or gpu_fwd_versions or \
(gpu and softmax and (auto_size_classes_forward or stale_and_poisoned))" 300
  XLA_PYTHON_CLIENT_PREALLOCATE=false timeout 200 python3 -P -m pytest -v -rfEs --timeout 100 \
    -k "big_softmax_size_class or big_layer_norm_forward or big_rms_norm_forward or big_norm_team_rows" \
    tests/test_gpu.py > "$out/big.log" 2>&1
  grep -E "PASSED|FAILED|SKIPPED|ERROR" "$out/big.log" | sed 's/ *\[.*//' | tail -8
  tail -n 1 "$out/big.log"
}

stage_cpu() { ab_san_cpu norm_fwd_lean rms_norm rms; }

stage_sweep() {
  timeout 150 python3 -P -m jax_memops.cli bench --ops rms_norm layer_norm --dirs fwd --parts sweep \
    --dtypes bfloat16 --out "$out/sweep-norms" > "$out/sweep-norms.log" 2>&1
  grep -E "^(layer|rms)_norm" "$out/sweep-norms.log"
}

stage_smxab() { SMX_CASES=${SMX_CASES:-bf16:128 bf16:256 f32:128} ab_smxab; }

stage_inproc() { IN_OPS=${IN_OPS:-rms-bf16} IN_ROUNDS=${IN_ROUNDS:-1 2 3} ab_inproc; }

stage_xla() {
  local case op dtype cols
  for case in ${XLA_CASES:-softmax:bfloat16:128 softmax:bfloat16:256 softmax:float32:128 layer_norm:bfloat16:1024}; do
    IFS=: read -r op dtype cols <<< "$case"
    timeout 60 python3 benchmarks/xla_kernels.py --op "$op" --dtype "$dtype" --cols "$cols" \
      --out "/tmp/xla-$op-$dtype-$cols" > "$out/xla_${op}_${dtype}_$cols.md" 2>&1
    echo "== $case rc=$?"
    grep -E "^\||fusion\(|custom-call\(" "$out/xla_${op}_${dtype}_$cols.md" | cut -c1-400 | head -20
  done
}

stage_ncu() {
  ab_ncu_cases ncu-short "regex:." softmax:fwd:bfloat16:128 softmax:fwd:bfloat16:256 softmax:fwd:float32:128 copy
  grep -E "^  [a-zA-Z_].*\(|Duration|DRAM Throughput|Memory Throughput" "$out/ncu-short.txt" | cut -c1-120
}

stage_smxv() {
  ab_gpu_tests smxv-tests 170 "gpu_fwd_versions or (gpu and (auto_size_classes_forward or stale_and_poisoned)) or \
(gpu and softmax and auto and (special_values or nan_row or masked_neg_inf or huge_logits))" 160
  timeout 40 python3 -P -m jax_memops.cli bench --ops softmax --dirs fwd --parts sweep --dtypes bfloat16 \
    --cols 64 128 --out "$out/sweep-smx" > "$out/sweep-smx.log" 2>&1
  grep -E "^softmax" "$out/sweep-smx.log"
}

ab_init "$@"
ab_run ab-v24
