"""v92 (RESULTS.md "The CPU handlers, v92"): LayerNorm and RMSNorm on a few long rows, the forward and a training step
(y and the gradients of a jitted VJP), ours and XLA's alternating. Run with PYTHONPATH=DIR of a `pip install --target
DIR` build; an argument N runs it on the process's first N CPUs."""
import os
import sys

if len(sys.argv) > 1:  # before JAX starts its pool and the handlers read the affinity
    os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:int(sys.argv[1])])

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

import jax_memops as jm  # noqa: E402
from jax_memops import bench, reference  # noqa: E402

OPS = {"layer_norm": (jm.layer_norm, reference.layer_norm),
       "rms_norm": (lambda x, s, b: jm.rms_norm(x, s), lambda x, s, b: reference.rms_norm(x, s))}

for shape in ((1, 1 << 17), (1, 1 << 20), (2, 1 << 19), (1, 100000), (64, 1000)):
    for dt in (jnp.float32, jnp.bfloat16):
        k = jax.random.split(jax.random.key(0), 4)
        x = (2 * jax.random.normal(k[0], shape)).astype(dt)
        g = jax.random.normal(k[1], shape).astype(dt)
        s = 1 + 0.1 * jax.random.normal(k[2], shape[-1:])
        b = 0.1 * jax.random.normal(k[3], shape[-1:])
        for name, (ours, xla) in OPS.items():
            def step(f):
                def run(x, s, b, g):
                    y, pull = jax.vjp(f, x, s, b)
                    return y, pull(g)
                return jax.jit(run)
            fo, fx, so, sx = jax.jit(ours), jax.jit(xla), step(ours), step(xla)
            t = bench.time_interleaved([lambda: fo(x, s, b), lambda: fx(x, s, b), lambda: so(x, s, b, g),
                                        lambda: sx(x, s, b, g)], None, 7, "wall")
            print(f"{len(os.sched_getaffinity(0)):2d} CPUs {name:10s} {str(shape):13s} {jnp.dtype(dt).name:8s} fwd ours {t[0]*1e3:8.1f} xla {t[1]*1e3:8.1f}  "
                  f"step ours {t[2]*1e3:8.1f} xla {t[3]*1e3:8.1f} us", flush=True)
