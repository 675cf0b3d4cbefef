"""The CPU handlers' results do not depend on how many threads share their work (cpp/cpu_common.h: the pieces of
parallel_for are fixed by the shape). A process allowed one CPU runs every piece in the calling thread; a process
with all of them shares pieces with XLA's pool, the caller spinning on the last ones; there the pool also shares the
column tiles of softmax rows of 2^17 elements or more, fewer than its threads (the 1-D x), and of the norms' rows where
their length times the threads reaches 2^20, which one CPU runs in turn. Both compute the same forwards and gradients,
which must agree to the bit."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

pytestmark = pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
                                reason="needs a process affinity of at least two CPUs")

# Run in a fresh process (the handlers read the affinity once): outputs of every op, dtype and a few shapes of several
# pieces each (2^15 elements a piece; a 1-D x in column tiles), as uint32 views of their float32 values, into an .npz.
_SCRIPT = r"""
import os, sys
if sys.argv[2] == "one":
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
import numpy as np, jax, jax.numpy as jnp
import jax_memops as jm
ops = {"softmax": lambda x, s, b: jm.softmax(x), "layer_norm": jm.layer_norm,
       "rms_norm": lambda x, s, b: jm.rms_norm(x, s), "gelu": jm.scale_bias_gelu}
key, out = jax.random.key(7), {}
for dt in (jnp.float32, jnp.bfloat16, jnp.float16):
    for shape in ((300, 1000), (3, 70000), (2000, 33), (64, 4097), (140001,), (524301,)):
        ks = jax.random.split(key, 4)
        x = (3 * jax.random.normal(ks[0], shape)).astype(dt)
        dy = jax.random.normal(ks[1], shape).astype(dt)
        s = 1 + 0.1 * jax.random.normal(ks[2], shape[-1:])
        b = 0.1 * jax.random.normal(ks[3], shape[-1:])
        for name, f in ops.items():
            if shape == (524301,) and name not in ("layer_norm", "rms_norm"):  # the norms' tiles shared on two CPUs
                continue
            y, pullback = jax.vjp(f, x, s, b)
            for i, a in enumerate((y,) + tuple(pullback(dy))):
                out[f"{name} {shape} {jnp.dtype(dt).name} {i}"] = np.asarray(a.astype(jnp.float32)).view(np.uint32)
np.savez(sys.argv[1], **out)
"""


def _outputs(tmp_path, cpus: str) -> dict:
    path = tmp_path / f"{cpus}.npz"
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    # cwd: not the repository, whose jax_memops/ holds no built extension
    subprocess.run([sys.executable, "-c", _SCRIPT, str(path), cpus], env=env, cwd=tmp_path, check=True, timeout=600)
    with np.load(path) as f:
        return {k: f[k] for k in f.files}


def test_one_cpu_and_all_cpus_give_the_same_bits(tmp_path):
    one, every = _outputs(tmp_path, "one"), _outputs(tmp_path, "all")
    assert one.keys() == every.keys() and len(one) == 4 * 3 * 5 * 4 + 2 * 3 * 4
    differ = [k for k in one if not np.array_equal(one[k], every[k])]
    assert not differ, f"outputs that depend on the thread count: {differ[:8]}"
