"""v93 (RESULTS.md "The CPU handlers, v93"): the backward of GELU and LayerNorm with per-feature parameters on a few
rows (their gradients summed over 1-16 rows), beside XLA's GELU backward, in the same process. Run with
PYTHONPATH=DIR of a `pip install --target DIR` build, old and new builds alternating."""
import jax
import jax.numpy as jnp

import jax_memops as jm
from jax_memops import bench

n = 1 << 20
res = []
for shape, dt in (((1, n), jnp.float32), ((1, n), jnp.bfloat16), ((4, n // 4), jnp.float32),
                  ((16, n // 16), jnp.float32)):
    x = jax.random.normal(jax.random.key(0), shape).astype(dt)
    g = jax.random.normal(jax.random.key(1), shape).astype(dt)
    s = 1 + 0.1 * jax.random.normal(jax.random.key(2), shape[-1:])
    b = 0.1 * s
    gb = jax.jit(lambda x, s, b, g: jax.vjp(jm.scale_bias_gelu, x, s, b)[1](g))
    lb = jax.jit(lambda x, s, b, g: jax.vjp(jm.layer_norm, x, s, b)[1](g))
    gx = jax.jit(lambda x, s, b, g: jax.vjp(jm.reference.scale_bias_gelu, x, s, b)[1](g))
    t = bench.time_interleaved([lambda: gb(x, s, b, g), lambda: lb(x, s, b, g), lambda: gx(x, s, b, g)], None, 9,
                               "wall")
    res.append(f"{shape} {jnp.dtype(dt).name}: gelu bwd {t[0] * 1e3:.0f} ln bwd {t[1] * 1e3:.0f} "
               f"xla gelu bwd {t[2] * 1e3:.0f} us")
print("\n".join(res))
