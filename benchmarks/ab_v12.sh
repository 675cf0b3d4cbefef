#!/usr/bin/env bash
# The v12 experiments (one device call runs some stages; A/B by environment variable, one build):
#   bash benchmarks/ab_v12.sh build mail push test race
#   mail   JAX_MEMOPS_SOFTMAX_BWD=v12-mail: the backward's register clusters (f32 C = 32768: k = 4 of 512
#          threads, 50257: 7, 131072: 8 of 1024) merge each row's sum(dy * y) by messages (mail_merge,
#          softmax_rows.cuh) instead of a cluster barrier and DSMEM reads, against the default (""); bwd
#          and fwd+bwd, f32 / bf16, two rounds. Predicted from v11's forward (+3 to +18% at k >= 4):
#          f32 50257 79-82% -> ~85% of the copy.
#   push   the forward's merge (JAX_MEMOPS_SOFTMAX_PUSH 0, default, 1) again: its kernel now calls the
#          shared mail_merge (SASS changed by scheduling from v11's measured one).
#   test   the backward versions (fresh processes, v12-mail among them) and the forward merge tests.
#   race   compute-sanitizer racecheck and memcheck over the cluster kernels alone (bulk-copy forward and
#          register-cluster backward, misaligned rows, many rows per cluster) under the default and
#          v12-mail (sanitize.py's softmax workload with a kernel filter crashed the tool in v11).
set -uo pipefail
source "$(dirname "$0")/ab_lib.sh"

stage_build() { ab_build || exit 1; }

stage_mail() {
  local round
  for round in 1 2; do
    timeout 200 python3 benchmarks/softmax_ab.py --var JAX_MEMOPS_SOFTMAX_BWD --versions "" v12-mail \
      --dirs bwd fwd+bwd --dtypes float32 bfloat16 --cols 32768 50257 131072 --out "$out/mail$round" \
      > "$out/mail$round.log" 2>&1
    grep -h "^|" "$out/mail$round.log"
  done
}

stage_push() {
  timeout 150 python3 benchmarks/softmax_ab.py --var JAX_MEMOPS_SOFTMAX_PUSH --versions 0 "" 1 \
    --dtypes float32 bfloat16 --cols 50257 65536 131072 262144 --out "$out/push" > "$out/push.log" 2>&1
  grep -h "^|" "$out/push.log"
}

stage_test() {
  ab_gpu_tests pytest-mail 240 "gpu_bwd_versions or push_reduce" 200
}

stage_race() {
  local tool bwd
  cat > /tmp/cluster_race.py <<'PY'
import jax, numpy as np, jax_memops as jm
rng = np.random.default_rng(0)
vjp = jax.jit(lambda x, g: jax.vjp(jm.softmax, x)[1](g)[0])
for shape, dt in (((3, 50257), np.float32), ((68, 131072), np.float32), ((9, 262147), np.float32),
                  ((60, 131073), jax.numpy.bfloat16), ((5, 65536), np.float32), ((30, 50257), np.float32),
                  ((7, 32768), jax.numpy.bfloat16)):
    x = np.asarray(jax.numpy.asarray(rng.standard_normal(shape), dt), np.float64)  # as the kernels see it
    g = np.asarray(jax.numpy.asarray(rng.standard_normal(shape), dt), np.float64)
    y = np.asarray(jax.jit(jm.softmax)(jax.numpy.asarray(x, dt)), np.float64)
    dx = np.asarray(vjp(jax.numpy.asarray(x, dt), jax.numpy.asarray(g, dt)), np.float64)
    r = np.exp(x - x.max(-1, keepdims=True)); r /= r.sum(-1, keepdims=True)
    rdx = r * (g - (g * r).sum(-1, keepdims=True))
    tol = 1e-5 if dt == np.float32 else 2e-2
    assert np.abs(y - r).max() <= tol * np.abs(r).max(), shape
    assert np.abs(dx - rdx).max() <= 4 * tol * np.abs(rdx).max(), shape
print("cluster race workload OK")
PY
  for bwd in "" v12-mail; do
    for tool in racecheck memcheck; do
      JAX_MEMOPS_SOFTMAX_BWD=$bwd XLA_PYTHON_CLIENT_PREALLOCATE=false XLA_FLAGS=--xla_gpu_enable_command_buffer= \
        timeout 120 compute-sanitizer --tool $tool --kernel-name kns=softmax_ \
        --error-exitcode 3 python3 /tmp/cluster_race.py > "$out/$tool-cluster-${bwd:-default}.log" 2>&1
      echo "$tool bwd=${bwd:-default} rc=$? $(grep -E 'SUMMARY|OK' "$out/$tool-cluster-${bwd:-default}.log" \
        | tail -2 | tr '\n' ' ')"
    done
  done
}

ab_init "$@"
ab_run ab-v12
