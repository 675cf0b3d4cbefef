"""jm.layer_norm and jm.rms_norm: forward and backward (dx, dscale, dbias) against the float64 NumPy
reference on every device and dtype, odd shapes, optional scale/bias, mixed parameter dtypes,
epsilon, numerically hard inputs (large mean / tiny variance, constant rows), empty inputs,
stale outputs and determinism."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_memops as jm
import memops_testing as mt
from memops_testing import SHAPE_IDS, SHAPES
from memops_testing import DTYPE_IDS, DTYPES, FWD_TOL, GRAD_TOL

PARAMS = ["scale+bias", "none", "scale", "bias"]


def _params(rng, c, which, dtype=np.float32):
    s = mt.randn(rng, (c,), dtype, scale=1.0, loc=1.0) if which in ("scale+bias", "scale") else None
    b = mt.randn(rng, (c,), dtype, scale=1.0) if which in ("scale+bias", "bias") else None
    return s, b


def _put(a, device):
    return None if a is None else jax.device_put(a, device)


@functools.partial(jax.jit, static_argnames=("epsilon",))
def layer_norm_jit(x, scale, bias, epsilon=1e-5):
    return jm.layer_norm(x, scale, bias, epsilon=epsilon)


@functools.partial(jax.jit, static_argnames=("epsilon",))
def layer_norm_vjp_jit(x, scale, bias, g, epsilon=1e-5):
    y, vjp = jax.vjp(lambda a, s, b: jm.layer_norm(a, s, b, epsilon=epsilon), x, scale, bias)
    return y, vjp(g)


@functools.partial(jax.jit, static_argnames=("epsilon",))
def rms_norm_jit(x, scale, epsilon=1e-6):
    return jm.rms_norm(x, scale, epsilon=epsilon)


@functools.partial(jax.jit, static_argnames=("epsilon",))
def rms_norm_vjp_jit(x, scale, g, epsilon=1e-6):
    y, vjp = jax.vjp(lambda a, s: jm.rms_norm(a, s, epsilon=epsilon), x, scale)
    return y, vjp(g)


def _check_out(out, x, device):
    assert out.shape == x.shape
    assert out.dtype == x.dtype, f"output dtype {out.dtype} != input dtype {x.dtype}"
    assert out.devices() == {device}, f"output on {out.devices()}, expected {device}"


# ----------------------------------------------------------------------------------------------
# layer_norm forward
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
def test_layer_norm_forward(device, rng, shape, dtype):
    c = shape[-1]
    x = mt.randn(rng, shape, dtype, scale=2.0, loc=0.5)
    s, b = _params(rng, c, "scale+bias")
    out = layer_norm_jit(jax.device_put(x, device), _put(s, device), _put(b, device))
    _check_out(out, x, device)
    mt.assert_finite(out)
    mt.assert_close(out, mt.ref_layer_norm(x, s, b), FWD_TOL[dtype], dtype=dtype)


@pytest.mark.parametrize("which", PARAMS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("shape", [(6, 33), (2, 3, 1000)], ids=["6x33", "2x3x1000"])
def test_layer_norm_optional_params(device, rng, shape, dtype, which):
    x = mt.randn(rng, shape, dtype, scale=1.5, loc=-0.3)
    s, b = _params(rng, shape[-1], which)
    out = layer_norm_jit(jax.device_put(x, device), _put(s, device), _put(b, device))
    _check_out(out, x, device)
    mt.assert_close(out, mt.ref_layer_norm(x, s, b), FWD_TOL[dtype], dtype=dtype)


def test_layer_norm_keyword_and_defaults(device, rng):
    x = jax.device_put(mt.randn(rng, (3, 20)), device)
    s, b = _params(rng, 20, "scale+bias")
    a = jm.layer_norm(x, scale=jax.device_put(s, device), bias=jax.device_put(b, device), epsilon=1e-5)
    mt.assert_close(a, mt.ref_layer_norm(x, s, b, 1e-5), FWD_TOL[mt.F32], dtype=mt.F32)
    mt.assert_close(jm.layer_norm(x), mt.ref_layer_norm(x, None, None, 1e-5), FWD_TOL[mt.F32], dtype=mt.F32)


@pytest.mark.parametrize("epsilon", [1e-12, 1e-5, 0.1, 3.0])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_layer_norm_epsilon(device, rng, dtype, epsilon):
    # small-variance rows, so that epsilon matters
    x = mt.randn(rng, (5, 40), dtype, scale=0.3)
    s, b = _params(rng, 40, "scale+bias")
    out = layer_norm_jit(jax.device_put(x, device), _put(s, device), _put(b, device), epsilon=epsilon)
    mt.assert_close(out, mt.ref_layer_norm(x, s, b, epsilon), FWD_TOL[dtype], dtype=dtype)


@pytest.mark.parametrize("pdtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_layer_norm_param_dtypes(device, rng, dtype, pdtype):
    """scale/bias of any float dtype; output in x's dtype; param grads in the params' dtypes."""
    x = mt.randn(rng, (4, 37), dtype)
    s, b = _params(rng, 37, "scale+bias", pdtype)
    g = mt.randn(rng, (4, 37), dtype, scale=1.0)
    y, (dx, ds, db) = layer_norm_vjp_jit(*(jax.device_put(a, device) for a in (x, s, b, g)))
    assert y.dtype == x.dtype and dx.dtype == x.dtype
    assert ds.dtype == s.dtype and db.dtype == b.dtype, (ds.dtype, db.dtype)
    mt.assert_close(y, mt.ref_layer_norm(x, s, b), FWD_TOL[dtype], dtype=dtype)
    rdx, rds, rdb = mt.ref_layer_norm_vjp(x, s, b, 1e-5, g)
    mt.assert_close(dx, rdx, GRAD_TOL[dtype], dtype=dtype, what="dx", mag=mt.ref_layer_norm_vjp_mag(x, s, 1e-5, g))
    ptol = max(GRAD_TOL[dtype], GRAD_TOL[pdtype])
    mt.assert_close(ds, rds, ptol, dtype=pdtype, what="dscale")
    mt.assert_close(db, rdb, ptol, dtype=pdtype, what="dbias")


@pytest.mark.parametrize("c", [31, 1000, 4097])
def test_layer_norm_large_mean_small_variance(device, rng, c):
    """x = 1e4 + 1e-2 * noise, epsilon = 1e-12, float32: the output must be accurate (a naive
    E[x^2] - E[x]^2 or unshifted float32 formulation loses everything here)."""
    x = (1e4 + 1e-2 * rng.standard_normal((4, c))).astype(np.float32)
    s, b = _params(rng, c, "scale+bias")
    out = layer_norm_jit(jax.device_put(x, device), _put(s, device), _put(b, device), epsilon=1e-12)
    mt.assert_finite(out)
    ref = mt.ref_layer_norm(x, s, b, 1e-12)
    mt.assert_close(out, ref, 1e-4, dtype=mt.F32)
    # without scale/bias the rows are standardized: mean 0, variance 1
    out2 = mt.f64(layer_norm_jit(jax.device_put(x, device), None, None, epsilon=1e-12))
    np.testing.assert_allclose(out2.mean(-1), 0.0, atol=1e-3)
    np.testing.assert_allclose(out2.var(-1), 1.0, rtol=1e-3)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_layer_norm_offset_data(device, rng, dtype):
    """Rows with a mean of 100 and unit spread (typical activations with a large offset)."""
    x = mt.randn(rng, (6, 257), dtype, scale=1.0, loc=100.0 if dtype != mt.BF16 else 10.0)
    s, b = _params(rng, 257, "scale+bias")
    out = layer_norm_jit(jax.device_put(x, device), _put(s, device), _put(b, device))
    mt.assert_close(out, mt.ref_layer_norm(x, s, b), FWD_TOL[dtype], dtype=dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("c", [1, 7, 1000])
def test_layer_norm_constant_rows(device, rng, c, dtype):
    """A constant row has zero variance: y = bias (exactly up to rounding), never NaN."""
    vals = np.array([0.0, 1.0, -3.7, 0.1, 1234.5], np.float32).astype(dtype)
    x = np.repeat(vals[:, None], c, axis=1)
    s, b = _params(rng, c, "scale+bias")
    out = mt.f64(layer_norm_jit(jax.device_put(x, device), _put(s, device), _put(b, device)))
    mt.assert_finite(out)
    want = np.broadcast_to(mt.round_to(b, dtype), out.shape)
    np.testing.assert_allclose(out, want, rtol=2 * FWD_TOL[dtype], atol=1e-3)
    g = mt.randn(rng, x.shape, dtype, scale=1.0)
    _, (dx, ds, db) = layer_norm_vjp_jit(*(jax.device_put(a, device) for a in (x, s, b, g)))
    for name, a in (("dx", dx), ("dscale", ds), ("dbias", db)):
        mt.assert_finite(a, name)
    mt.assert_close(db, mt.f64(g).sum(0), GRAD_TOL[dtype], what="dbias")


# ----------------------------------------------------------------------------------------------
# layer_norm backward
# ----------------------------------------------------------------------------------------------


def _check_ln_grads(x, s, b, g, eps, got, dtype):
    dx, ds, db = got
    rdx, rds, rdb = mt.ref_layer_norm_vjp(x, s, b, eps, g)
    mt.assert_finite(dx, "dx")
    mt.assert_close(dx, rdx, GRAD_TOL[dtype], dtype=dtype, what="dx", mag=mt.ref_layer_norm_vjp_mag(x, s, eps, g))
    if s is not None:
        assert ds.shape == s.shape and ds.dtype == s.dtype
        mt.assert_close(ds, rds, GRAD_TOL[dtype], dtype=s.dtype, what="dscale")
    if b is not None:
        assert db.shape == b.shape and db.dtype == b.dtype
        mt.assert_close(db, rdb, GRAD_TOL[dtype], dtype=b.dtype, what="dbias")


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
def test_layer_norm_grad(device, rng, shape, dtype):
    c = shape[-1]
    x = mt.randn(rng, shape, dtype, scale=2.0, loc=0.5)
    s, b = _params(rng, c, "scale+bias")
    g = mt.randn(rng, shape, dtype, scale=1.0)
    y, grads = layer_norm_vjp_jit(*(jax.device_put(a, device) for a in (x, s, b, g)))
    _check_out(y, x, device)
    _check_out(grads[0], x, device)
    _check_ln_grads(x, s, b, g, 1e-5, grads, dtype)


@pytest.mark.parametrize("which", PARAMS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_layer_norm_grad_optional_params(device, rng, dtype, which):
    x = mt.randn(rng, (5, 3, 40), dtype)
    s, b = _params(rng, 40, which)
    g = mt.randn(rng, x.shape, dtype, scale=1.0)
    y, grads = layer_norm_vjp_jit(jax.device_put(x, device), _put(s, device), _put(b, device), jax.device_put(g, device), epsilon=1e-3)
    _check_ln_grads(x, s, b, g, 1e-3, grads, dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("shape", [(6, 33), (3, 1000), (2, 3, 64)], ids=["6x33", "3x1000", "2x3x64"])
def test_layer_norm_grad_matches_xla(device, rng, shape, dtype):
    """jax.grad of sum(layer_norm(x, s, b) * w) equals jax.grad of the pure-jnp definition computed
    in float32 on upcast inputs (loose for bf16/f16)."""
    x = mt.randn(rng, shape, dtype, scale=2.0)
    s, b = _params(rng, shape[-1], "scale+bias")
    w = mt.randn(rng, shape, np.float32, scale=1.0)
    args = [jax.device_put(a, device) for a in (x, s, b, w)]

    @jax.jit
    def ours(x, s, b, w):
        return jax.grad(lambda *a: jnp.sum(jm.layer_norm(*a).astype(jnp.float32) * w), argnums=(0, 1, 2))(x, s, b)

    @jax.jit
    def xla(x, s, b, w):
        return jax.grad(lambda *a: jnp.sum(mt.jnp_layer_norm(*a) * w), argnums=(0, 1, 2))(x.astype(jnp.float32), s, b)

    got, want = ours(*args), xla(*args)
    tol = {mt.F32: 1e-5, mt.BF16: 3e-2, mt.F16: 5e-3}[dtype]
    for name, a, w_ in zip(("dx", "dscale", "dbias"), got, want):
        w64 = mt.f64(w_)
        assert mt.rel_err(a, w64) < tol + 2 * mt.rel_err(mt.round_to(w64, a.dtype), w64), name


# ----------------------------------------------------------------------------------------------
# rms_norm
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
def test_rms_norm_forward(device, rng, shape, dtype):
    x = mt.randn(rng, shape, dtype, scale=2.0, loc=0.3)
    s, _ = _params(rng, shape[-1], "scale")
    out = rms_norm_jit(jax.device_put(x, device), jax.device_put(s, device))
    _check_out(out, x, device)
    mt.assert_finite(out)
    mt.assert_close(out, mt.ref_rms_norm(x, s), FWD_TOL[dtype], dtype=dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_rms_norm_no_scale_and_defaults(device, rng, dtype):
    x = mt.randn(rng, (3, 5, 77), dtype)
    xd = jax.device_put(x, device)
    out = rms_norm_jit(xd, None)
    _check_out(out, x, device)
    mt.assert_close(out, mt.ref_rms_norm(x, None, 1e-6), FWD_TOL[dtype], dtype=dtype)
    mt.assert_close(jm.rms_norm(xd), mt.ref_rms_norm(x, None, 1e-6), FWD_TOL[dtype], dtype=dtype)


@pytest.mark.parametrize("epsilon", [1e-12, 1e-6, 0.1, 3.0])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_rms_norm_epsilon(device, rng, dtype, epsilon):
    x = mt.randn(rng, (5, 40), dtype, scale=0.3)
    s, _ = _params(rng, 40, "scale")
    out = rms_norm_jit(jax.device_put(x, device), jax.device_put(s, device), epsilon=epsilon)
    mt.assert_close(out, mt.ref_rms_norm(x, s, epsilon), FWD_TOL[dtype], dtype=dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_rms_norm_zero_rows(device, rng, dtype):
    """All-zero rows: y = 0 (finite thanks to epsilon), and finite gradients."""
    x = mt.randn(rng, (4, 50), dtype)
    x[1] = 0
    x[3] = 0
    s, _ = _params(rng, 50, "scale")
    g = mt.randn(rng, x.shape, dtype, scale=1.0)
    y, (dx, ds) = rms_norm_vjp_jit(*(jax.device_put(a, device) for a in (x, s, g)))
    mt.assert_finite(y, "y")
    mt.assert_finite(dx, "dx")
    mt.assert_finite(ds, "dscale")
    assert (mt.f64(y)[[1, 3]] == 0).all()
    mt.assert_close(y, mt.ref_rms_norm(x, s), FWD_TOL[dtype], dtype=dtype)
    mt.assert_close(dx, mt.ref_rms_norm_vjp(x, s, 1e-6, g)[0], GRAD_TOL[dtype], dtype=dtype, mag=mt.ref_rms_norm_vjp_mag(x, s, 1e-6, g))


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_rms_norm_large_values(device, rng, dtype):
    """Large-magnitude rows (x^2 far beyond float16's range; 1e12-scale values in f32/bf16) stay
    finite and accurate."""
    big = {mt.F32: 1e12, mt.BF16: 1e12, mt.F16: 3e3}[dtype]
    x = mt.randn(rng, (3, 300), dtype, scale=big)
    s, _ = _params(rng, 300, "scale")
    out = rms_norm_jit(jax.device_put(x, device), jax.device_put(s, device))
    mt.assert_finite(out)
    mt.assert_close(out, mt.ref_rms_norm(x, s), FWD_TOL[dtype], dtype=dtype)


def _check_rms_grads(x, s, g, eps, got, dtype):
    dx, ds = got
    rdx, rds = mt.ref_rms_norm_vjp(x, s, eps, g)
    mt.assert_finite(dx, "dx")
    mt.assert_close(dx, rdx, GRAD_TOL[dtype], dtype=dtype, what="dx", mag=mt.ref_rms_norm_vjp_mag(x, s, eps, g))
    if s is not None:
        assert ds.shape == s.shape and ds.dtype == s.dtype
        mt.assert_close(ds, rds, GRAD_TOL[dtype], dtype=s.dtype, what="dscale")


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
def test_rms_norm_grad(device, rng, shape, dtype):
    x = mt.randn(rng, shape, dtype, scale=2.0, loc=0.3)
    s, _ = _params(rng, shape[-1], "scale")
    g = mt.randn(rng, shape, dtype, scale=1.0)
    y, grads = rms_norm_vjp_jit(*(jax.device_put(a, device) for a in (x, s, g)))
    _check_out(y, x, device)
    _check_out(grads[0], x, device)
    _check_rms_grads(x, s, g, 1e-6, grads, dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_rms_norm_grad_no_scale(device, rng, dtype):
    x = mt.randn(rng, (4, 3, 70), dtype)
    g = mt.randn(rng, x.shape, dtype, scale=1.0)
    y, grads = rms_norm_vjp_jit(jax.device_put(x, device), None, jax.device_put(g, device), epsilon=1e-3)
    _check_rms_grads(x, None, g, 1e-3, grads, dtype)


@pytest.mark.parametrize("pdtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_rms_norm_param_dtypes(device, rng, dtype, pdtype):
    x = mt.randn(rng, (4, 37), dtype)
    s, _ = _params(rng, 37, "scale", pdtype)
    g = mt.randn(rng, (4, 37), dtype, scale=1.0)
    y, (dx, ds) = rms_norm_vjp_jit(*(jax.device_put(a, device) for a in (x, s, g)))
    assert y.dtype == x.dtype and dx.dtype == x.dtype and ds.dtype == s.dtype
    mt.assert_close(y, mt.ref_rms_norm(x, s), FWD_TOL[dtype], dtype=dtype)
    rdx, rds = mt.ref_rms_norm_vjp(x, s, 1e-6, g)
    mt.assert_close(dx, rdx, GRAD_TOL[dtype], dtype=dtype, what="dx", mag=mt.ref_rms_norm_vjp_mag(x, s, 1e-6, g))
    mt.assert_close(ds, rds, max(GRAD_TOL[dtype], GRAD_TOL[pdtype]), dtype=pdtype, what="dscale")


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("shape", [(6, 33), (3, 1000)], ids=["6x33", "3x1000"])
def test_rms_norm_grad_matches_xla(device, rng, shape, dtype):
    x = mt.randn(rng, shape, dtype, scale=2.0)
    s, _ = _params(rng, shape[-1], "scale")
    w = mt.randn(rng, shape, np.float32, scale=1.0)
    args = [jax.device_put(a, device) for a in (x, s, w)]

    @jax.jit
    def ours(x, s, w):
        return jax.grad(lambda *a: jnp.sum(jm.rms_norm(*a).astype(jnp.float32) * w), argnums=(0, 1))(x, s)

    @jax.jit
    def xla(x, s, w):
        return jax.grad(lambda *a: jnp.sum(mt.jnp_rms_norm(*a) * w), argnums=(0, 1))(x.astype(jnp.float32), s)

    tol = {mt.F32: 1e-5, mt.BF16: 3e-2, mt.F16: 5e-3}[dtype]
    for name, a, w_ in zip(("dx", "dscale"), ours(*args), xla(*args)):
        w64 = mt.f64(w_)
        assert mt.rel_err(a, w64) < tol + 2 * mt.rel_err(mt.round_to(w64, a.dtype), w64), name


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("shape", [(1, 524301), (3, 70001), (2, 131075)], ids=["1x524301", "3x70001", "2x131075"])
def test_few_long_rows(device, rng, shape, dtype):
    """Rows of more than 2^16 features: the CPU reduces them by column tiles, and where the rows are fewer than its
    threads and long enough (on two CPUs 2^19) the pool shares the tiles (cpp/norms_cpu.cc, v92). Both norms, forward
    and gradients,
    against float64; in f32 one row with a large mean and a tiny variance (LayerNorm's pivot must hold it), and a
    constant row (y = bias, dx finite)."""
    c = shape[-1]
    x = mt.randn(rng, shape, dtype, scale=2.0, loc=0.5)
    if dtype == mt.F32:
        x[0] = 1e4 + 1e-2 * rng.standard_normal(c)
    if shape[0] > 1:
        x[-1] = 3.0
    s, b = _params(rng, c, "scale+bias")
    g = mt.randn(rng, shape, dtype, scale=1.0)
    eps = 1e-12 if dtype == mt.F32 else 1e-5
    y, grads = layer_norm_vjp_jit(*(jax.device_put(a, device) for a in (x, s, b, g)), epsilon=eps)
    _check_out(y, x, device)
    mt.assert_finite(y)
    mt.assert_close(y, mt.ref_layer_norm(x, s, b, eps), 1e-4 if dtype == mt.F32 else FWD_TOL[dtype], dtype=dtype)
    _check_ln_grads(x, s, b, g, eps, grads, dtype)
    y, grads = rms_norm_vjp_jit(*(jax.device_put(a, device) for a in (x, s, g)))
    _check_out(y, x, device)
    mt.assert_close(y, mt.ref_rms_norm(x, s), FWD_TOL[dtype], dtype=dtype)
    _check_rms_grads(x, s, g, 1e-6, grads, dtype)


# ----------------------------------------------------------------------------------------------
# empty inputs, stale outputs, determinism
# ----------------------------------------------------------------------------------------------

EMPTY_SHAPES = [(0, 8), (4, 0), (2, 0, 3), (0,)]


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("shape", EMPTY_SHAPES, ids=["x".join(map(str, s)) for s in EMPTY_SHAPES])
def test_layer_norm_empty(device, shape, dtype):
    c = shape[-1]
    x = np.zeros(shape, dtype)
    s, b = np.ones(c, np.float32), np.zeros(c, np.float32)
    y, (dx, ds, db) = layer_norm_vjp_jit(*(jax.device_put(a, device) for a in (x, s, b, x)))
    assert y.shape == shape and y.dtype == x.dtype
    assert dx.shape == shape and dx.dtype == x.dtype
    assert ds.shape == (c,) and db.shape == (c,)
    # no rows: parameter gradients are zero
    np.testing.assert_array_equal(mt.f64(ds), 0.0)
    np.testing.assert_array_equal(mt.f64(db), 0.0)
    out = jm.layer_norm(jax.device_put(x, device))
    assert out.shape == shape and out.dtype == x.dtype


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("shape", EMPTY_SHAPES, ids=["x".join(map(str, s)) for s in EMPTY_SHAPES])
def test_rms_norm_empty(device, shape, dtype):
    c = shape[-1]
    x = np.zeros(shape, dtype)
    s = np.ones(c, np.float32)
    y, (dx, ds) = rms_norm_vjp_jit(*(jax.device_put(a, device) for a in (x, s, x)))
    assert y.shape == shape and y.dtype == x.dtype
    assert dx.shape == shape and dx.dtype == x.dtype
    assert ds.shape == (c,)
    np.testing.assert_array_equal(mt.f64(ds), 0.0)
    out = jm.rms_norm(jax.device_put(x, device))
    assert out.shape == shape and out.dtype == x.dtype


@pytest.mark.parametrize("shape", [(7, 33), (3, 4097)], ids=["7x33", "3x4097"])
def test_layer_norm_stale_and_poisoned_outputs(device, rng, shape):
    c = shape[-1]
    for _ in range(2):
        mt.poison(device, shape)
        x = mt.randn(rng, shape, np.float32)
        s, b = _params(rng, c, "scale+bias")
        g = mt.randn(rng, shape, np.float32, scale=1.0)
        y, grads = layer_norm_vjp_jit(*(jax.device_put(a, device) for a in (x, s, b, g)))
        mt.assert_finite(y, "y")
        mt.assert_close(y, mt.ref_layer_norm(x, s, b), FWD_TOL[mt.F32], dtype=mt.F32, what="y")
        for name, a in zip(("dx", "dscale", "dbias"), grads):
            mt.assert_finite(a, name)
        _check_ln_grads(x, s, b, g, 1e-5, grads, mt.F32)


@pytest.mark.parametrize("shape", [(7, 33), (3, 4097)], ids=["7x33", "3x4097"])
def test_rms_norm_stale_and_poisoned_outputs(device, rng, shape):
    c = shape[-1]
    for _ in range(2):
        mt.poison(device, shape)
        x = mt.randn(rng, shape, np.float32)
        s, _ = _params(rng, c, "scale")
        g = mt.randn(rng, shape, np.float32, scale=1.0)
        y, grads = rms_norm_vjp_jit(*(jax.device_put(a, device) for a in (x, s, g)))
        mt.assert_finite(y, "y")
        mt.assert_close(y, mt.ref_rms_norm(x, s), FWD_TOL[mt.F32], dtype=mt.F32, what="y")
        _check_rms_grads(x, s, g, 1e-6, grads, mt.F32)


@pytest.mark.parametrize("dtype", [mt.F32, mt.BF16], ids=["f32", "bf16"])
def test_norm_backward_deterministic(device, rng, dtype):
    """Two runs of the same backward give bitwise identical dx, dscale, dbias (all devices)."""
    shape = (2048, 256)
    x = mt.randn(rng, shape, dtype)
    s, b = _params(rng, 256, "scale+bias")
    g = mt.randn(rng, shape, dtype, scale=1.0)
    args = [jax.device_put(a, device) for a in (x, s, b, g)]
    _, r1 = layer_norm_vjp_jit(*args)
    r1 = [np.asarray(a) for a in r1]
    _, r2 = layer_norm_vjp_jit(*args)
    for name, a, b_ in zip(("dx", "dscale", "dbias"), r1, r2):
        mt.assert_bitwise_equal(a, np.asarray(b_), name)
    _, q1 = rms_norm_vjp_jit(args[0], args[1], args[3])
    q1 = [np.asarray(a) for a in q1]
    _, q2 = rms_norm_vjp_jit(args[0], args[1], args[3])
    for name, a, b_ in zip(("rms dx", "rms dscale"), q1, q2):
        mt.assert_bitwise_equal(a, np.asarray(b_), name)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_eager_matches_jit(device, rng, dtype):
    x = jax.device_put(mt.randn(rng, (5, 77), dtype), device)
    s, b = (jax.device_put(a, device) for a in _params(rng, 77, "scale+bias"))
    mt.assert_close(jm.layer_norm(x, s, b), mt.f64(layer_norm_jit(x, s, b)), FWD_TOL[dtype], dtype=dtype)
    mt.assert_close(jm.rms_norm(x, s), mt.f64(rms_norm_jit(x, s)), FWD_TOL[dtype], dtype=dtype)


def test_numpy_input(rng):
    x = mt.randn(rng, (3, 10))
    s, b = _params(rng, 10, "scale+bias")
    mt.assert_close(jm.layer_norm(x, s, b), mt.ref_layer_norm(x, s, b), FWD_TOL[mt.F32], dtype=mt.F32)
    mt.assert_close(jm.rms_norm(x, s), mt.ref_rms_norm(x, s), FWD_TOL[mt.F32], dtype=mt.F32)
