"""The cluster kernels' workload for compute-sanitizer (racecheck, memcheck): jm.softmax forward and its VJP
at shapes that run the bulk-copy forward and the backward's register clusters (k = 2 .. 16 by the plans; v38's 4
or 5 packs per thread on 512 or 1024 threads; v39's y-held clusters at f32 262144 /
524288, bf16 524288 / 1000003; f32 100000 on 10 CTAs of 5 packs (7 of 7 packs holding y under branch v40's rule);
v42's (the default) CTAs of other multiples of 32 threads, e.g. bf16 50257 (5 x 256), f32 16385 (7 x 128), bf16
150001 (8 x 480), and under JAX_MEMOPS_SOFTMAX_BWD=v41 f32 65536 (7 x 480); misaligned rows, many rows per
cluster; and the forward alone at TICKET_SHAPES), and v14's two-pass
forward of 16-bit rows (misaligned; 300 rows, more than its 264 CTAs: CTAs reuse their double-buffered block
partials), checked against float64. Small
enough for the sanitizers; run it under a kernel filter, e.g. compute-sanitizer --tool racecheck
--kernel-name kns=softmax_ python3 benchmarks/cluster_race.py (benchmarks/ab_v11.sh .. ab_v14.sh, race
stages)."""

import jax
import jax.numpy as jnp
import numpy as np

import jax_memops as jm

SHAPES = (((3, 50257), np.float32), ((68, 131072), np.float32), ((9, 262147), np.float32),
          ((60, 131073), jnp.bfloat16), ((5, 65536), np.float32), ((30, 50257), np.float32),
          ((7, 32768), jnp.bfloat16), ((5, 16385), np.float32), ((6, 50257), jnp.bfloat16),
          ((300, 40001), jnp.float16), ((2, 262144), np.float32), ((2, 524288), jnp.bfloat16),
          ((3, 327680), jnp.float16), ((2, 524288), np.float32), ((1, 1000003), jnp.bfloat16),
          ((2, 100000), np.float32), ((3, 150001), jnp.bfloat16))
# The forward alone where the bulk-copy clusters take more than two rows each, so that rows come by tickets (the
# default v75's f32, every dtype under v73: the draws, the messages to the cluster, the last CTA's reset): f32 50257
# (124 clusters of 4 CTAs), 131072 (45 of 8), bf16 131072 and 100000 on their register or one-buffer plans.
TICKET_SHAPES = (((300, 50257), np.float32), ((200, 131072), np.float32), ((300, 131072), jnp.bfloat16),
                 ((400, 100000), jnp.bfloat16))
Y_TOL = {np.float32: 1e-5, jnp.bfloat16: 1e-2, jnp.float16: 2e-3}  # of max |y|
DX_TOL = {np.float32: 4e-5, jnp.bfloat16: 8e-2, jnp.float16: 1e-2}  # of max |dx|


def check_forward(rng, shape, dt):
    """jm.softmax of a fresh x against float64; returns x (as the kernels see it) and the reference."""
    x = np.asarray(jnp.asarray(rng.standard_normal(shape), dt), np.float64)
    y = np.asarray(jax.jit(jm.softmax)(jnp.asarray(x, dt)), np.float64)
    r = np.exp(x - x.max(-1, keepdims=True))
    r /= r.sum(-1, keepdims=True)
    assert np.abs(y - r).max() <= Y_TOL[dt] * np.abs(r).max(), ("y", shape, dt)
    return x, r


def main():
    rng = np.random.default_rng(0)
    vjp = jax.jit(lambda x, g: jax.vjp(jm.softmax, x)[1](g)[0])
    for shape, dt in SHAPES:
        x, r = check_forward(rng, shape, dt)
        g = np.asarray(jnp.asarray(rng.standard_normal(shape), dt), np.float64)
        dx = np.asarray(vjp(jnp.asarray(x, dt), jnp.asarray(g, dt)), np.float64)
        rdx = r * (g - (g * r).sum(-1, keepdims=True))
        assert np.abs(dx - rdx).max() <= DX_TOL[dt] * np.abs(rdx).max(), ("dx", shape, dt)
    for shape, dt in TICKET_SHAPES:
        check_forward(rng, shape, dt)
    print("cluster race workload OK")


if __name__ == "__main__":
    main()
