"""v92 (RESULTS.md "The CPU handlers, v92"): the forwards of LayerNorm and RMSNorm on one row, in the same process,
median of 15 timings each: `python3 long_fwd_ab.py DTYPE COLS`. Run with PYTHONPATH=DIR of a `pip install --target
DIR` build, old and new builds alternating."""
import sys

import jax
import jax.numpy as jnp

import jax_memops as jm
from jax_memops import bench

n = int(sys.argv[2]) if len(sys.argv) > 2 else 1 << 20
x = jax.random.normal(jax.random.key(0), (1, n)).astype(sys.argv[1])
s, b = jnp.ones(n), jnp.zeros(n)
fl = jax.jit(jm.layer_norm)
fr = jax.jit(lambda x, s: jm.rms_norm(x, s))
t = bench.time_interleaved([lambda: fl(x, s, b), lambda: fr(x, s)], None, 15, "wall")
print(f"{sys.argv[1]} 1 x {n}: layer_norm {t[0] * 1e3:.0f} us, rms_norm {t[1] * 1e3:.0f} us")
