"""v94 (RESULTS.md "The CPU handlers, v94"): softmax's forward on one long row (its tiles shared by the pool), ours
and XLA's in the same process: `python3 softmax_long_ab.py DTYPE`. Run with PYTHONPATH=DIR of a `pip install
--target DIR` build, old and new builds alternating."""
import sys

import jax
import jax.numpy as jnp

import jax_memops as jm
from jax_memops import bench

out = []
for n in (1 << 17, 1 << 18, 1 << 20):
    x = (2 * jax.random.normal(jax.random.key(0), (1, n))).astype(sys.argv[1])
    f, fx = jax.jit(jm.softmax), jax.jit(jax.nn.softmax)
    t = bench.time_interleaved([lambda: f(x), lambda: fx(x)], None, 15, "wall")
    out.append(f"{sys.argv[1]} 1 x {n}: ours {t[0] * 1e3:.0f} xla {t[1] * 1e3:.0f} us")
print("\n".join(out))
