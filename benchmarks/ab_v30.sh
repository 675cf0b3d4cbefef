#!/usr/bin/env bash
# The v30 device calls: the bench's device timing (jax_memops/_device_timing.py, `--timing device`).
#   dtest    tests/test_device_timing.py and tests/test_cli.py on the GPU.
#   cost     what a trace costs: two device_times calls on a 256 MB copy, each timed by the wall clock.
#   fusion   the fusion experiment (n = 2^25, 2^28; f32, bf16) with device timing, then with wall timing; one process
#            each.
#   norms    the bench's LayerNorm and RMSNorm forward and forward + backward, f32 and bf16, device timing.
#   softmax  the bench's softmax forward and backward, f32 and bf16, device timing.
#   gelu     the bench's GELU forward and forward + backward, f32 and bf16, device timing.
#   full     the whole default bench (sweep, ladder, transformer block, MLP blocks, fusion), device timing
#            (FULL_TAG: a suffix for a second process's files).
#   models   the transformer block and the MLP blocks by the wall clock, then by device time; one process each.
#   partials benchmarks/partials_ab.py (PARTIALS_ARGS: its options): the norms' backward and training step under
#            workspace rules (first round: PARTIALS_BYTES 256 against 64; then v29's rule against v30's; GELU's at
#            PARTIALS_TARGET 528 and PARTIALS_BYTES 64: PARTIALS_TAG=_gelu PARTIALS_ARGS="--ops gelu --cols 768 1024
#            2048 4096 --variants default target=528 bytes=64"), device time.
#   ptest    the norms' backward tests on the GPU (v30's workspace rule: paired blocks, determinism,
#            the gradient tests of tests/test_norms.py).
#   nbench   the bench's LayerNorm and RMSNorm backward and forward + backward, f32 and bf16, device timing.
set -uo pipefail
source "$(dirname "$0")/ab_lib.sh"

stage_build() { ab_build || exit 1; }

stage_dtest() { ab_gpu_tests dtest 200 "test_device_timing or test_cli" 190; }

stage_cost() {
  timeout 120 python3 -P - <<'PY' 2>&1 | grep -v "^[WI]0000\|^WARNING" | tee "$out/trace_cost.md"
import time, jax, jax.numpy as jnp
from jax_memops import bench
from jax_memops._device_timing import device_times
x = jnp.ones((1 << 26,), jnp.float32)
calls = [bench.copy_of(x), bench.memcpy_of(x)]
for f in calls:
    jax.block_until_ready(f())
for attempt in range(3):
    t0 = time.perf_counter()
    ms = device_times(calls, 20, 7)
    print(f"trace {attempt}: {time.perf_counter() - t0:.2f} s; copy {ms[0] * 1e3:.1f} us "
          f"({2 * 4 * x.size / (ms[0] * 1e-3) / 1e9:.0f} GB/s), memcpy {ms[1] * 1e3:.1f} us")
print("wall:", [f"{t * 1e3:.1f} us" for t in bench.time_interleaved(calls, 20, 7)])
PY
}

stage_fusion() {
  ab_dbench fusion-device device --fusion
  ab_dbench fusion-wall wall --fusion
}

stage_norms() { ab_dbench norms-device device --ops layer_norm rms_norm --dirs fwd fwd+bwd --parts sweep; }
stage_softmax() { ab_dbench softmax-device device --ops softmax --dirs fwd bwd --parts sweep; }
stage_gelu() { ab_dbench gelu-device device --ops gelu --dirs fwd fwd+bwd --parts sweep; }

stage_full() {
  local name=full-device${FULL_TAG:-}
  timeout 500 python3 -P -m jax_memops.cli bench --timing device --out "$out/$name" > "$out/$name.log" 2>&1
  echo "rc=$?"
  grep -vE "^\[|^[WI]0000|^WARNING" "$out/$name.log" | tail -n 200
}

stage_models() {
  ab_dbench models-wall wall --parts model mlp
  grep -E "block" "$out/models-wall.log"
  ab_dbench models-device device --parts model mlp
  grep -E "block" "$out/models-device.log"
}

stage_partials() {
  timeout 400 python3 -P benchmarks/partials_ab.py ${PARTIALS_ARGS:-} 2>&1 | grep -vE "^[WI]0000|^WARNING" \
    | tee "$out/partials_ab${PARTIALS_TAG:-}.md"
}

stage_ptest() {
  ab_gpu_tests ptest 300 "paired_blocks or backward_deterministic or (test_norms and grad)" 280
}

stage_nbench() { ab_norm_nbench; }

ab_init "$@"
ab_run v30
