"""v91 (RESULTS.md "The CPU handlers, v91"): softmax on a few long rows, forward and a training step (y and dx of a
jitted VJP, added), ours and XLA's alternating. Run with PYTHONPATH=DIR of a `pip install --target DIR` build."""
import jax
import jax.numpy as jnp

import jax_memops as jm
from jax_memops import bench

for shape in ((1, 100000), (1, 1 << 17), (1, 262144), (1, 1 << 20), (2, 1 << 17), (4, 1 << 17), (8, 1 << 17)):
    for dt in (jnp.float32, jnp.bfloat16):
        x = (2 * jax.random.normal(jax.random.key(0), shape)).astype(dt)
        g = jax.random.normal(jax.random.key(1), shape).astype(dt)
        fo, fx = jax.jit(jm.softmax), jax.jit(jax.nn.softmax)
        so = jax.jit(lambda x, g: jax.vjp(jm.softmax, x)[1](g)[0] + jax.vjp(jm.softmax, x)[0])
        sx = jax.jit(lambda x, g: jax.vjp(jax.nn.softmax, x)[1](g)[0] + jax.vjp(jax.nn.softmax, x)[0])
        t = bench.time_interleaved([lambda: fo(x), lambda: fx(x), lambda: so(x, g), lambda: sx(x, g)], None, 7, "wall")
        print(f"{str(shape):13s} {jnp.dtype(dt).name:8s} fwd ours {t[0]*1e3:8.1f} xla {t[1]*1e3:8.1f}  "
              f"step ours {t[2]*1e3:8.1f} xla {t[3]*1e3:8.1f} us", flush=True)
