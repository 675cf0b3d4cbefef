"""Programmatic dependent launch (v82; cpp/cuda_base.cuh pdl_entry): under JAX_MEMOPS_PDL=1 every kernel of the library
(not the seed's ladder) may start before the stream's previous kernel has finished and waits for it before its first
access to global memory. A training step's forward and backward through every op, jitted (so XLA may capture the
launches into command buffers), on fresh inputs call after call with no synchronization between them, must give
bitwise what the same program gives with plain launches; and the plain launches' outputs are the ones the rest of the
suite checks against float64. GPU only, and slow (two interpreters)."""

from __future__ import annotations

import os

import numpy as np
import pytest

import memops_testing as mt

# Row lengths of every kernel class: register rows (1000), block rows (4097), long rows (50257: the bulk-copy clusters in
# f32, the L2 rows in 16-bit; 131072 on 300 rows: bulk-copy clusters in both), the norms' lean and team rows.
PDL_SHAPES = [(4096, 1000), (600, 4097), (300, 50257), (300, 131072)]
_PDL_STEP_SCRIPT = r"""
import jax, jax.numpy as jnp, numpy as np, jax_memops as jm, sys
sys.path.insert(0, {tests!r})
import memops_testing as mt
rng = np.random.default_rng(4)


def fwd(x, s, b, gs, gb):
    h = jm.layer_norm(x, s, b)
    h = jm.scale_bias_gelu(h, gs, gb)
    h = jm.rms_norm(h, s)
    return jm.softmax(h * 4.0)


@jax.jit
def step(ct, *args):
    y, vjp = jax.vjp(fwd, *args)
    return (y,) + vjp(ct)


gpu = jax.devices("gpu")[0]
out = {{}}
for dtype in (mt.F32, mt.BF16):
    for rows, c in {shapes!r}:
        calls = []
        for i in range(4):
            ct, x = mt.randn(rng, (rows, c), np.float32), mt.randn(rng, (rows, c), np.float32, scale=2.0)
            params = [mt.randn(rng, (c,), np.float32) for _ in range(4)]  # LayerNorm's scale, bias; GELU's
            calls.append(step(*[jax.device_put(a.astype(dtype), gpu) for a in [ct, x] + params]))
        # (no synchronization above: each call's kernels queue behind the previous call's)
        for i, res in enumerate(calls):
            for j, r in enumerate(res):
                out[f"{{np.dtype(dtype).name}}-{{rows}}x{{c}}-{{i}}-{{j}}"] = np.asarray(r).astype(np.float32)
np.savez({path!r}, **out)
print("OK")
"""


@pytest.mark.gpu
@pytest.mark.slow
def test_gpu_pdl_bitwise(gpu, tmp_path):
    runs = {}
    for pdl in ("0", "1"):
        path = os.path.join(tmp_path, f"pdl{pdl}.npz")
        mt.run_script(_PDL_STEP_SCRIPT, env=dict(JAX_MEMOPS_PDL=pdl), shapes=PDL_SHAPES, path=path)
        runs[pdl] = np.load(path)
    assert sorted(runs["0"].files) == sorted(runs["1"].files)
    for key in runs["0"].files:
        plain, dependent = runs["0"][key], runs["1"][key]
        assert np.isfinite(plain).all(), key
        assert np.array_equal(plain, dependent), f"{key}: {np.count_nonzero(plain != dependent)} elements differ"


# Every kernel that launch() or the cluster launches start may be launched so: each must begin with pdl_entry, before
# any access to global memory. The seed's ladder (launch_plain) alone does not.
def test_every_kernel_starts_with_pdl_entry():
    import glob
    import re

    root = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "cpp")
    kernels = 0
    for path in sorted(glob.glob(os.path.join(root, "*.cu")) + glob.glob(os.path.join(root, "*.cuh"))):
        text = open(path).read()
        for m in re.finditer(r"__global__[^;{]*?(\w+)\s*\([^;{]*\)\s*\{\s*(\S[^\n]*)", text):
            name, first = m.group(1), m.group(2)
            if os.path.basename(path) == "softmax_ladder.cu":
                assert not first.startswith("pdl_entry()"), f"{name}: the ladder launches plainly (launch_plain)"
                continue
            kernels += 1
            assert first.startswith("pdl_entry();"), f"{os.path.basename(path)}: {name} starts with {first!r}"
        if os.path.basename(path) == "softmax_ladder.cu":
            assert re.search(r"\blaunch\(", text) is None, "the ladder's kernels have no pdl_entry: launch_plain"
    assert kernels >= 18, kernels
