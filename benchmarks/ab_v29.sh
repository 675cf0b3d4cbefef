#!/usr/bin/env bash
# The v29 device calls.
#   copy     benchmarks/copy_ceiling.cu (the driver's device-to-device copy against kernel copies, bulk copies,
#            read-only and write-only streams, 256 MB and 2 GB, the output at offsets; single launches and ten back
#            to back), then XLA's jitted copy (the bench's: XOR of a uint32 buffer) at the same sizes, for calibration.
#   packs    ab_inproc over IN_OPS="packs-f32 packs-bf16" (benchmarks/norm_fwd_ab.cu), rounds "k1 k2": the lean rows at
#            1, 2, 3, 4 packs per thread against the default then (f32 v4's rows, bf16 the lean rows at 8 / 6 packs)
#            and both copies.
#   v29      ab_inproc over IN_OPS=v29, rounds "n1 n2": the rule adopted (lean_block_packs) against the rule before
#            (v28, twice: A/A), f32 and bf16 LayerNorm and RMSNorm.
#   nverify  the norms' forward GPU tests (size classes, versions with v28, row groups, large mean) beside
#            compute-sanitizer memcheck and racecheck over every norm forward kernel (sanitize.py --fwd: layer_norm, its
#            scale-only and parameter-free forms, rms_norm).
#   big      the > 2^31-element norm forwards: bf16 LayerNorm / RMSNorm at C = 4096 (v29: 4 / 3 packs), the team rows,
#            f32 rows of 2048 (v29: 3 packs).
#   final    the bench's LayerNorm and RMSNorm forward and forward + backward, f32 and bf16, one process each.
#   gelu     benchmarks/gelu_fwd_ab.cu: the GELU forward at 4 (the default, twice: A/A), 2 and 1 packs per thread,
#            f32 and bf16, per-feature parameter rows and scalar attributes, beside two copies; two rounds.
#   gcols    (branch v29-gelu-cols, whose harness and header have it) benchmarks/gelu_fwd_ab.cu cols: the GELU forward
#            by columns (gelu_fwd_cols.cuh: a column pack's parameters held in registers, 8..32 rows per thread, 2 / 4
#            loads ahead) against the elementwise loop, parameter rows, f32 and bf16, C = 768, 1024, 4096, 12288; two
#            rounds. Refuted (RESULTS.md "v29").
#   gverify  the GELU tests on the GPU (every parameter mode, grids, stale / poisoned outputs, the > 2^31 forward) beside
#            compute-sanitizer memcheck and racecheck over the GELU forward (sanitize.py --fwd: arrays, attributes).
#   gbench   the bench's GELU forward sweep and the fusion experiment, one process.
#   memcpy   the bench's second ceiling (unfused.copy: the device's copy by one custom call): tests/test_unfused.py and
#            tests/test_cli.py on the GPU, then the bench's LayerNorm / RMSNorm / GELU forward sweep with its memcpy
#            column, one process.
set -uo pipefail
source "$(dirname "$0")/ab_lib.sh"

stage_build() { ab_build || exit 1; }

stage_copy() {
  ab_nvcc_harness copy_ceiling.cu /tmp/copy_ceiling || return 1
  timeout 200 /tmp/copy_ceiling > "$out/copy_ceiling${COPY_TAG:-}.md" 2>&1
  echo "rc=$?"
  cat "$out/copy_ceiling${COPY_TAG:-}.md"
  timeout 120 python3 -P - > "$out/xla_copy${COPY_TAG:-}.md" 2>&1 <<'PY'
import statistics, time
import jax, jax.numpy as jnp
for mb in (256, 2048):
    x = jax.random.bits(jax.random.key(0), (mb << 18,), jnp.uint32)
    f = jax.jit(lambda a: a ^ jnp.uint32(0x5A5A5A5A))
    jax.block_until_ready(f(x)); jax.block_until_ready(f(x))
    for iters in (1, 10):
        ts = []
        for _ in range(15):
            t0 = time.perf_counter()
            for _ in range(iters):
                r = f(x)
            jax.block_until_ready(r)
            ts.append((time.perf_counter() - t0) / iters)
        t = statistics.median(ts)
        gbs = 2 * (mb << 20) / t / 1e9
        print(f"| XLA XOR copy {mb} MB, {iters} back to back | {t * 1e3:.4f} ms | {gbs:.0f} GB/s |")
PY
  cat "$out/xla_copy${COPY_TAG:-}.md"
}

stage_packs() { IN_OPS=${IN_OPS:-packs-f32 packs-bf16} IN_ROUNDS=${IN_ROUNDS:-k1 k2} ab_inproc; }

stage_v29() { IN_OPS=${IN_OPS:-v29} IN_ROUNDS=${IN_ROUNDS:-n1 n2} ab_inproc; }

stage_nverify() { ab_norm_fwd_verify; }

stage_big() {
  ab_big_tests "big_layer_norm_forward or big_rms_norm_forward or \
big_norm_team_rows or big_norm_forward_f32"
}

stage_final() {
  ab_norm_sweep fwd norms
  ab_norm_sweep fwd+bwd norms-fb
}

stage_gelu() {
  ab_nvcc_harness gelu_fwd_ab.cu /tmp/gelu_fwd_ab || return 1
  local round
  for round in ${GELU_ROUNDS:-g1 g2}; do
    timeout 120 /tmp/gelu_fwd_ab > "$out/gelu_fwd_ab_r$round.md" 2>&1
    echo "rc=$?"
    cat "$out/gelu_fwd_ab_r$round.md"
  done
}

stage_gverify() {
  SAN_ARGS=--fwd ab_sanitize gelu kns=gelu_fwd 200 gelu_arrays gelu_scalars &
  ab_gpu_tests gelu-tests 200 "gelu" 190
  wait
  XLA_PYTHON_CLIENT_PREALLOCATE=false timeout 120 python3 -P -m pytest -q -rfE --timeout 110 -k "big_gelu_forward" \
    tests/test_gpu.py > "$out/big-gelu.log" 2>&1
  tail -n 1 "$out/big-gelu.log"
}

stage_gbench() {
  timeout 200 python3 -P -m jax_memops.cli bench --ops gelu --dirs fwd --parts sweep fusion \
    --dtypes float32 bfloat16 --out "$out/sweep-gelu" > "$out/sweep-gelu.log" 2>&1
  grep -E "^gelu|fused|kernels|XLA" "$out/sweep-gelu.log" | head -40
}

stage_memcpy() {
  ab_gpu_tests memcpy-tests 150 "test_unfused or test_cli" 140
  timeout 200 python3 -P -m jax_memops.cli bench --ops layer_norm rms_norm gelu --dirs fwd --parts sweep \
    --dtypes float32 bfloat16 --out "$out/sweep-memcpy" > "$out/sweep-memcpy.log" 2>&1
  grep -E "^(op|layer_norm|rms_norm|gelu) " "$out/sweep-memcpy.log"
}

ab_init "$@"
ab_run v29
