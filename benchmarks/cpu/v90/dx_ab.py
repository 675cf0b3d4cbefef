"""v90 (RESULTS.md "The CPU handlers, v90"): GELU's dx alone (scalar scale and bias: no parameter gradient) against
XLA's, on a 1-D x, two long rows and two shapes of short rows. Run with PYTHONPATH=DIR of a `pip install --target
DIR` build."""
import jax
import jax.numpy as jnp

import jax_memops as jm
from jax_memops import bench

for shape in ((1 << 21,), (2, 1 << 20), (64, 1 << 15), (2048, 1000)):
    for dt in (jnp.float32, jnp.float16):
        x = jax.random.normal(jax.random.key(0), shape).astype(dt)
        g = jnp.ones_like(x)
        f = jax.jit(lambda x, g: jax.vjp(lambda v: jm.scale_bias_gelu(v, 1.5, 0.25), x)[1](g))
        r = jax.jit(lambda x, g: jax.vjp(lambda v: jax.nn.gelu(v * 1.5 + 0.25), x)[1](g))
        t = bench.time_interleaved([lambda: f(x, g), lambda: r(x, g)], None, 7, "wall")
        print(f"{str(shape):14s} {jnp.dtype(dt).name:8s} dx-only ours {t[0]:.3f} xla {t[1]:.3f}", flush=True)
