"""The parameter gradients (dscale, dbias) at shapes that the CPU handlers sum in each of their ways
(cpp/cpu_grad_sums.h): rows in runs whose sums go through the workspace's partial rows, each row group one run written
into its gradient row, and the column split. Every case against float64 and bitwise run twice; on a GPU the same shapes
check the CUDA kernels' partials."""

from __future__ import annotations

import jax
import numpy as np
import pytest

import jax_memops as jm
import memops_testing as mt
from memops_testing import DTYPE_IDS, DTYPES, GRAD_TOL

# (batch: a vmap over per-example parameters, or None; rows; C) and the CPU's split of the sums: runs of at least 32
# rows and 2^15 elements, at most 64 in all, GELU's in tiles of <= 4096 columns, the row split taken from 8 runs in
# all or for an x of <= 2^16 elements.
CASES = {
    "300x4097": (None, 300, 4097),  # one group in 9 runs (GELU: 2 tiles each): the workspace's partial rows
    "2x1400x500": (2, 1400, 500),  # two groups of 21 runs each
    "16x40x300": (16, 40, 300),  # 16 groups, a run each, into the gradients' rows
    "260x9001": (None, 260, 9001),  # 8 runs (GELU: of 3 tiles each)
    "4096x64": (None, 4096, 64),  # one group in 8 runs of 512 rows
    "2000x64": (None, 2000, 64),  # one group, 3 runs of a larger x: the column split
    "3x5x7": (3, 5, 7),  # small: a run per group
}
OPS = ["layer_norm", "rms_norm", "gelu"]
EPS = {"layer_norm": 1e-5, "rms_norm": 1e-6}


def _op(op, **kw):
    return {"layer_norm": lambda x, s, b: jm.layer_norm(x, s, b, **kw),
            "rms_norm": lambda x, s, b: jm.rms_norm(x, s, **kw),
            "gelu": lambda x, s, b: jm.scale_bias_gelu(x, s, b)}[op]


def _ref(op, x, s, b, g):
    """(dx, dscale, dbias or None, dx's magnitude) of one example in float64."""
    if op == "gelu":
        return (*mt.ref_scale_bias_gelu_vjp(x, s, b, g), mt.ref_scale_bias_gelu_vjp_mag(x, s, b, g))
    if op == "layer_norm":
        return (*mt.ref_layer_norm_vjp(x, s, b, EPS[op], g), mt.ref_layer_norm_vjp_mag(x, s, EPS[op], g))
    return (*mt.ref_rms_norm_vjp(x, s, EPS[op], g), None, mt.ref_rms_norm_vjp_mag(x, s, EPS[op], g))


def _check(device, rng, op, case, x_dtype, y_dtype):
    batch, n, c = CASES[case]
    lead = () if batch is None else (batch,)
    x = mt.randn(rng, (*lead, n, c), x_dtype, scale=2.0, loc=0.3)
    s = mt.randn(rng, (*lead, c), mt.F32, loc=1.0, scale=0.5)
    b = mt.randn(rng, (*lead, c), mt.F32)
    g = mt.randn(rng, (*lead, n, c), y_dtype, scale=1.0)
    kw = {} if y_dtype == x_dtype else {"dtype": y_dtype}
    f = _op(op, **kw)

    def grads(x, s, b, g):
        return jax.vjp(f, x, s, b)[1](g)

    run = jax.jit(grads if batch is None else jax.vmap(grads))
    args = [jax.device_put(a, device) for a in (x, s, b, g)]
    got = [np.asarray(t) for t in run(*args)]
    wanted = 2 if op == "rms_norm" else 3
    for i in range(batch or 1):
        pick = (lambda a: a) if batch is None else (lambda a: a[i])
        rdx, rds, rdb, mag = _ref(op, *(pick(a) for a in (x, s, b, g)))
        tol = GRAD_TOL[x_dtype] if y_dtype == x_dtype else GRAD_TOL[mt.F32] * 10
        mt.assert_close(pick(got[0]), rdx, tol, dtype=x_dtype, what=f"{op} dx {i}", mag=mag)
        for k, (want, what) in enumerate(((rds, "dscale"), (rdb, "dbias"))[:wanted - 1]):
            mt.assert_close(pick(got[1 + k]), want, tol, dtype=mt.F32, what=f"{op} {what} {i}")
    for k, again in enumerate(run(*args)[:wanted]):
        mt.assert_bitwise_equal(got[k], np.asarray(again), f"{op} gradient {k} run twice")


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("op", OPS)
def test_param_grads(device, rng, op, case, dtype):
    _check(device, rng, op, case, dtype, dtype)


# The norms' dy in another dtype than x (their dtype=): an f16 dy is converted into a row buffer of its own beside g.
PAIRS = [(mt.F32, mt.F16), (mt.F16, mt.F32), (mt.BF16, mt.F16)]


@pytest.mark.parametrize("x_dtype,y_dtype", PAIRS, ids=[f"{mt.dtype_id(a)}-to-{mt.dtype_id(b)}" for a, b in PAIRS])
@pytest.mark.parametrize("case", ["300x4097", "2x1400x500"])
@pytest.mark.parametrize("op", ["layer_norm", "rms_norm"])
def test_param_grads_output_dtype(device, rng, op, case, x_dtype, y_dtype):
    _check(device, rng, op, case, x_dtype, y_dtype)
