"""Self-checks of the float64 NumPy references in memops_testing.py against JAX's own float64
formulations (jax.nn.softmax and jax.grad of the pure-jnp definitions under jax.enable_x64).

These tests do not import jax_memops: they validate the yardstick the other tests use.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import memops_testing as mt


def _x64(fn, *args):
    with jax.enable_x64(True):
        out = fn(*[None if a is None else jnp.asarray(np.asarray(a, np.float64)) for a in args])
        return jax.tree_util.tree_map(lambda t: np.asarray(t, np.float64), out)


@pytest.mark.parametrize("shape,axis", [((5, 7), -1), ((5, 7), 0), ((2, 3, 4), 1), ((9,), 0)])
def test_ref_softmax_matches_jax(rng, shape, axis):
    x = rng.standard_normal(shape) * 3
    g = rng.standard_normal(shape)
    np.testing.assert_allclose(mt.ref_softmax(x, axis), _x64(lambda a: jax.nn.softmax(a, axis=axis), x), rtol=1e-12)
    vjp = _x64(lambda a, w: jax.grad(lambda t: jnp.sum(jax.nn.softmax(t, axis=axis) * w))(a), x, g)
    np.testing.assert_allclose(mt.ref_softmax_vjp(x, g, axis), vjp, rtol=1e-10, atol=1e-13)


def test_ref_softmax_special_values():
    x = np.array([[0.0, -np.inf, 1.0], [-np.inf, -np.inf, -np.inf], [np.nan, 0.0, 1.0], [1e4, 0.0, -1e4]])
    ref = mt.ref_softmax(x)
    jx = _x64(jax.nn.softmax, x)
    np.testing.assert_array_equal(np.isnan(ref), np.isnan(jx))
    fin = ~np.isnan(ref)
    np.testing.assert_allclose(ref[fin], jx[fin], rtol=1e-12)
    assert ref[0, 1] == 0.0 and np.isnan(ref[1]).all() and np.isnan(ref[2]).all()


@pytest.mark.parametrize("with_scale,with_bias", [(True, True), (False, False), (True, False), (False, True)])
def test_ref_layer_norm_matches_jax(rng, with_scale, with_bias):
    x = rng.standard_normal((4, 6)) * 2 + 0.5
    s = rng.standard_normal(6) if with_scale else None
    b = rng.standard_normal(6) if with_bias else None
    g = rng.standard_normal((4, 6))
    eps = 1e-3
    np.testing.assert_allclose(mt.ref_layer_norm(x, s, b, eps), _x64(lambda *a: mt.jnp_layer_norm(*a, eps=eps), x, s, b), rtol=1e-12)
    argnums = (0,) + ((1,) if with_scale else ()) + ((2,) if with_bias else ())

    def grads(x_, s_, b_, g_):
        return jax.grad(lambda *a: jnp.sum(mt.jnp_layer_norm(*a, eps=eps) * g_), argnums=argnums)(x_, s_, b_)

    want = _x64(grads, x, s, b, g)
    got = mt.ref_layer_norm_vjp(x, s, b, eps, g)
    got = [got[0]] + ([got[1]] if with_scale else []) + ([got[2]] if with_bias else [])
    for a, w in zip(got, want):
        np.testing.assert_allclose(a, w, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("with_scale", [True, False])
def test_ref_rms_norm_matches_jax(rng, with_scale):
    x = rng.standard_normal((4, 6)) * 2 + 0.5
    s = rng.standard_normal(6) if with_scale else None
    g = rng.standard_normal((4, 6))
    eps = 1e-3
    np.testing.assert_allclose(mt.ref_rms_norm(x, s, eps), _x64(lambda *a: mt.jnp_rms_norm(*a, eps=eps), x, s), rtol=1e-12)
    argnums = (0, 1) if with_scale else (0,)
    want = _x64(lambda x_, s_, g_: jax.grad(lambda *a: jnp.sum(mt.jnp_rms_norm(*a, eps=eps) * g_), argnums=argnums)(x_, s_), x, s, g)
    dx, ds = mt.ref_rms_norm_vjp(x, s, eps, g)
    np.testing.assert_allclose(dx, want[0], rtol=1e-9, atol=1e-12)
    if with_scale:
        np.testing.assert_allclose(ds, want[1], rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("kind", ["numbers", "arrays", "mixed"])
def test_ref_gelu_matches_jax(rng, kind):
    x = rng.standard_normal((4, 6)) * 2
    g = rng.standard_normal((4, 6))
    if kind == "numbers":
        s, b = 1.3, -0.4
    elif kind == "arrays":
        s, b = rng.standard_normal(6), rng.standard_normal(6)
    else:
        s, b = 0.7, rng.standard_normal(6)
    arr_s, arr_b = not isinstance(s, float), not isinstance(b, float)
    want_y = _x64(lambda a: mt.jnp_scale_bias_gelu(a, jnp.asarray(s) if arr_s else s, jnp.asarray(b) if arr_b else b), x)
    np.testing.assert_allclose(mt.ref_scale_bias_gelu(x, s, b), want_y, rtol=1e-12, atol=1e-15)

    def grads(x_, s_, b_, g_):
        return jax.grad(lambda a, c, d: jnp.sum(mt.jnp_scale_bias_gelu(a, c, d) * g_), argnums=(0, 1, 2))(x_, s_, b_)

    want = _x64(grads, x, np.asarray(s, np.float64) if arr_s else np.full(6, s), np.asarray(b, np.float64) if arr_b else np.full(6, b), g)
    dx, ds, db = mt.ref_scale_bias_gelu_vjp(x, s, b, g)
    np.testing.assert_allclose(dx, want[0], rtol=1e-9, atol=1e-12)
    if arr_s:
        np.testing.assert_allclose(ds, want[1], rtol=1e-9, atol=1e-12)
    else:
        assert ds is None
    if arr_b:
        np.testing.assert_allclose(db, want[2], rtol=1e-9, atol=1e-12)
    else:
        assert db is None


def test_assert_close_catches_errors():
    ref = np.linspace(0.1, 1.0, 40).reshape(4, 10)
    mt.assert_close(ref.astype(np.float32), ref, 1e-5, dtype=np.float32)
    bad = ref.copy()
    bad[2, 3] += 1e-3
    with pytest.raises(AssertionError):
        mt.assert_close(bad, ref, 1e-5, dtype=np.float32)
    nan = ref.copy()
    nan[1, 1] = np.nan
    with pytest.raises(AssertionError, match="NaN"):
        mt.assert_close(nan, ref, 1e-2, dtype=mt.BF16)
    with pytest.raises(AssertionError, match="shape"):
        mt.assert_close(ref[:3], ref, 1e-2)
    # bf16 rounding of the output alone is tolerated
    mt.assert_close(mt.round_to(ref, mt.BF16), ref, 1e-2, dtype=mt.BF16)
