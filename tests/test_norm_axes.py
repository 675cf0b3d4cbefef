"""jm.layer_norm / jm.rms_norm over several axes (`axis=`): rows made of trailing axes (torch's normalized_shape),
of other axes (moved last), of all of x (None) or of single entries (()); parameters of x's sizes along those axes.
Forward and backward against a float64 NumPy reference that reduces over the axes directly (no flattening), the
bits of the equivalent flattened call, vmap, forward mode, empty inputs and the errors."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_memops as jm
import memops_testing as mt
from memops_testing import DTYPE_IDS, DTYPES, FWD_TOL, GRAD_TOL

CASES = [
    ((3, 5, 33), (1, 2)),      # torch's normalized_shape (5, 33)
    ((2, 3, 4, 31), (-2, -1)),
    ((2, 3, 4, 31), (1, 2, 3)),
    ((3, 5, 33), (0, 2)),      # not the trailing ones: moved last
    ((3, 5, 33), 0),           # one axis that is not the last
    ((4097, 2), (0, 1)),       # one row of 8194
    ((3, 5, 33), None),        # all of x
    ((3, 5, 7), ()),           # each entry a row of its own
    ((3, 5, 33), [2]),         # a list, the last axis alone
]
IDS = [f"{'x'.join(map(str, s))}-axis{'all' if a is None else '.'.join(map(str, np.atleast_1d(a))) or 'none'}"
       for s, a in CASES]


def _axes(axis, ndim):
    return tuple(range(ndim)) if axis is None else tuple(sorted(a % ndim for a in np.atleast_1d(axis).tolist()))


def _static(axis):
    return tuple(axis) if isinstance(axis, list) else axis


def _run(op, device, x, s, b, g, axis):
    """(y, (dx, dscale[, dbias])) of one jitted VJP of the op over `axis`."""
    return mt.norm_vjp(op, device, x, s, b, g, axis=axis)


@pytest.mark.parametrize("op", ["layer_norm", "rms_norm"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("shape,axis", CASES, ids=IDS)
def test_norm_over_axes(device, rng, op, shape, axis, dtype):
    axes = _axes(axis, len(shape))
    pshape = tuple(shape[a] for a in axes)
    x = mt.randn(rng, shape, dtype, scale=2.0, loc=0.5)
    s, b = mt.randn(rng, pshape, loc=1.0), mt.randn(rng, pshape)
    g = mt.randn(rng, shape, dtype, scale=1.0)
    rms = op == "rms_norm"
    mt.poison(device, (2,) + shape)
    y, grads = _run(op, device, x, s, b, g, _static(axis))
    eps = 1e-6 if rms else 1e-5
    ry, rdx, rds, rdb, mag = mt.ref_norm_axes(x, s, None if rms else b, axes, eps, rms, g)
    assert y.shape == shape and y.dtype == x.dtype and grads[0].dtype == x.dtype
    mt.assert_close(mt.as_rows(y, axes), mt.as_rows(ry, axes), FWD_TOL[dtype], dtype=dtype, what="y")
    mt.assert_close(mt.as_rows(grads[0], axes), mt.as_rows(rdx, axes), GRAD_TOL[dtype], dtype=dtype, what="dx",
                    mag=mt.as_rows(mag, axes))
    assert grads[1].shape == pshape and grads[1].dtype == s.dtype
    mt.assert_close(grads[1], rds, GRAD_TOL[dtype], dtype=mt.F32, what="dscale", row_factor=1e9)
    if not rms:
        assert grads[2].shape == pshape
        mt.assert_close(grads[2], rdb, GRAD_TOL[dtype], dtype=mt.F32, what="dbias", row_factor=1e9)


@pytest.mark.parametrize("dtype", [mt.F32, mt.BF16], ids=["f32", "bf16"])
def test_trailing_axes_are_the_flattened_row(device, rng, dtype):
    """Rows of trailing axes are the same kernel rows as x reshaped by hand: bitwise the same y and gradients."""
    x = jax.device_put(mt.randn(rng, (6, 4, 129), dtype), device)
    s, b = (jax.device_put(mt.randn(rng, (4, 129), loc=1.0), device) for _ in range(2))
    g = jax.device_put(mt.randn(rng, (6, 4, 129), dtype, scale=1.0), device)
    y, grads = _run("layer_norm", device, x, s, b, g, (-2, -1))
    flat = (x.reshape(6, -1), s.reshape(-1), b.reshape(-1), g.reshape(6, -1))
    y2, grads2 = _run("layer_norm", device, *flat, -1)
    mt.assert_bitwise_equal(np.asarray(y), np.asarray(y2).reshape(y.shape), "y")
    for name, u, v in zip(("dx", "dscale", "dbias"), grads, grads2):
        mt.assert_bitwise_equal(np.asarray(u), np.asarray(v).reshape(u.shape), name)
    r, (dr, dsr) = _run("rms_norm", device, x, s, None, g, (1, 2))
    r2, (dr2, dsr2) = _run("rms_norm", device, flat[0], flat[1], None, flat[3], 1)
    for name, u, v in (("rms y", r, r2), ("rms dx", dr, dr2), ("rms dscale", dsr, dsr2)):
        mt.assert_bitwise_equal(np.asarray(u), np.asarray(v).reshape(u.shape), name)


def test_axes_without_params_and_under_vmap(device, rng):
    """No parameters; vmap over a leading axis with per-example parameters (the mapped axis joins the rows)."""
    x = mt.randn(rng, (4, 3, 5, 7), mt.F32, scale=2.0)
    s = mt.randn(rng, (4, 5, 7), loc=1.0)
    xd, sd = jax.device_put(x, device), jax.device_put(s, device)
    y = jax.jit(lambda t: jm.layer_norm(t, axis=(1, 3)))(xd)
    mt.assert_close(mt.as_rows(y, (1, 3)), mt.as_rows(mt.ref_norm_axes(x, None, None, (1, 3), 1e-5, False, x)[0], (1, 3)),
                    FWD_TOL[mt.F32], dtype=mt.F32)
    z = jax.jit(jax.vmap(lambda t, p: jm.rms_norm(t, p, axis=(-2, -1))))(xd, sd)
    for k in range(4):
        want = mt.ref_norm_axes(x[k], s[k], None, (1, 2), 1e-6, True, x[k])[0]
        mt.assert_close(mt.as_rows(z[k], (1, 2)), mt.as_rows(want, (1, 2)), FWD_TOL[mt.F32], dtype=mt.F32, what=f"vmap {k}")


def test_axes_forward_mode(device, rng):
    """jax.jvp over several axes (the tangent map on the flattened rows) against a float64 difference quotient's
    exact counterpart: the jvp of the float32 jax.numpy formulation over the same axes."""
    x = mt.randn(rng, (3, 4, 9), mt.F32, scale=2.0, loc=0.5)
    s, b = mt.randn(rng, (4, 9), loc=1.0), mt.randn(rng, (4, 9))
    t, ts, tb = mt.randn(rng, x.shape, scale=1.0), mt.randn(rng, s.shape, scale=1.0), mt.randn(rng, b.shape, scale=1.0)
    put = [jax.device_put(a, device) for a in (x, s, b, t, ts, tb)]

    def xla(x, s, b):
        mean = jnp.mean(x, axis=(1, 2), keepdims=True)
        var = jnp.mean(jnp.square(x - mean), axis=(1, 2), keepdims=True)
        return (x - mean) * jax.lax.rsqrt(var + 1e-5) * s + b

    ours = jax.jit(lambda *a: jax.jvp(lambda x, s, b: jm.layer_norm(x, s, b, axis=(1, 2)), a[:3], a[3:]))(*put)
    want = jax.jit(lambda *a: jax.jvp(xla, a[:3], a[3:]))(*put)
    for name, u, v in zip(("y", "ty"), ours, want):
        mt.assert_close(mt.as_rows(u, (1, 2)), mt.as_rows(v, (1, 2)), 1e-5, dtype=mt.F32, what=name)


@pytest.mark.parametrize("shape,axis", [((0, 3, 4), (1, 2)), ((2, 0, 3), (1, 2)), ((2, 3, 0), (0, 1))])
def test_axes_empty(device, shape, axis):
    axes = _axes(axis, len(shape))
    pshape = tuple(shape[a] for a in axes)
    x = jax.device_put(np.zeros(shape, np.float32), device)
    s, b = jnp.ones(pshape), jnp.zeros(pshape)
    y, (dx, ds, db) = _run("layer_norm", device, x, s, b, x, axis)
    assert y.shape == dx.shape == shape and ds.shape == db.shape == pshape
    r, (dr, dsr) = _run("rms_norm", device, x, s, None, x, axis)
    assert r.shape == dr.shape == shape and dsr.shape == pshape
    if x.size == 0 and np.prod(pshape) > 0:  # no rows: the parameter gradients are sums of nothing
        np.testing.assert_array_equal(mt.f64(ds), 0.0)
        np.testing.assert_array_equal(mt.f64(dsr), 0.0)


@pytest.mark.parametrize("op", ["layer_norm", "rms_norm"])
def test_axes_errors(op):
    x = jnp.ones((2, 3, 5, 8))
    f = getattr(jm, op)
    for axis, scale, exc, words in [
        ((2, 3), jnp.ones(8), ValueError, ["scale", "(5, 8)", "(2, 3)"]),      # the last axis' shape is not enough
        ((2, 3), jnp.ones((8, 5)), ValueError, ["scale", "(5, 8)"]),          # sizes in x's order
        (-1, jnp.ones((5, 8)), ValueError, ["scale", "(8,)", "last axis"]),
        (4, None, ValueError, ["axis", "out of range"]),
        ((1, -3), None, ValueError, ["axis", "twice"]),
        (1.0, None, TypeError, ["axis", "tuple of ints"]),
    ]:
        with pytest.raises(exc) as e:
            f(x, scale, axis=axis)
        with pytest.raises(exc):
            jax.jit(lambda t: f(t, scale, axis=axis))(x)
        assert all(w in str(e.value) for w in words), str(e.value)
    if op == "layer_norm":
        with pytest.raises(ValueError, match="bias must have shape"):
            jm.layer_norm(x, jnp.ones((5, 8)), jnp.ones(8), axis=(-2, -1))
