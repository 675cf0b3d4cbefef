"""GPU-only tests (skipped with a reason when JAX sees no GPU or jax_memops has no CUDA kernels):

* tensors of more than 2**31 elements (64-bit indexing) in bfloat16: softmax forward (every
  algorithm but the one-thread-per-row ones, v1 and v5, too slow there) and backward, layer_norm forward, rms_norm forward, scale_bias_gelu forward. The data
  is generated on the GPU (softmax "auto" also in its cluster class: 16385 rows of 131072, forward
  and backward); rows near the start, just before and beyond element 2**31 are checked
  against the float64 NumPy reference of those rows only, and every row is checked on the device
  against XLA's own float32 formulation (max-error reductions, so nothing big comes back).
* bitwise determinism of the backward kernels (layer_norm, rms_norm, gelu with array params).

Memory stays well below 40 GB: x (4 GiB bf16) plus at most three tensors of the same size.
"""

from __future__ import annotations

import gc

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_memops as jm
import memops_testing as mt

BIG_C = 4096
BIG_N = 2**31 // BIG_C + 3  # 524291 rows: 2**31 + 12288 elements
FIRST_BEYOND = 2**31 // BIG_C  # the first row whose elements all lie at or beyond index 2**31
CHECK_ROWS = np.array([0, 1, 2, FIRST_BEYOND - 2, FIRST_BEYOND - 1, FIRST_BEYOND, FIRST_BEYOND + 1, BIG_N - 1])

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def big(request):
    """(gpu, x) with x of shape (BIG_N, BIG_C) bf16 on the GPU, shared by this module's big tests."""
    from conftest import gpu_devices, gpu_skip_reason

    reason = gpu_skip_reason()
    if reason is not None:
        pytest.skip(reason)
    gpu = gpu_devices()[0]
    key = jax.device_put(jax.random.key(20240611), gpu)
    x = jax.jit(lambda k: (2.0 * jax.random.normal(k, (BIG_N, BIG_C), jnp.float32)).astype(jnp.bfloat16))(key)
    x.block_until_ready()
    assert x.size > 2**31
    yield gpu, x
    x.delete()
    gc.collect()


def _rows(a):
    return np.asarray(a[jnp.asarray(CHECK_ROWS)])


def _params(gpu, seed):
    rng = np.random.default_rng(seed)
    s = mt.randn(rng, (BIG_C,), np.float32, scale=0.5, loc=1.0)
    b = mt.randn(rng, (BIG_C,), np.float32, scale=1.0)
    return s, b, jax.device_put(s, gpu), jax.device_put(b, gpu)


def _device_max_err(ours, ref_fn, *args):
    """max over all entries of |ours - ref| - 1e-2 * |ref| with ref in float32 (XLA), on the device."""

    @jax.jit
    def f(o, *a):
        r = ref_fn(*a)
        d = jnp.abs(o.astype(jnp.float32) - r) - 1e-2 * jnp.abs(r)
        return jnp.max(d), jnp.all(jnp.isfinite(o))

    err, finite = f(ours, *args)
    return float(err), bool(finite)


# One thread per row (v1, v5) walks its 4096-element row alone, three and two times, uncoalesced: far
# slower than the others on 524291 rows and no different in indexing (the same int64 row offset).
_ONE_THREAD_PER_ROW = ("thread_per_row", "online_thread_per_row")
BIG_ALGORITHMS = [
    pytest.param(a, marks=pytest.mark.skip(reason=f"{a}: one thread per row is too slow for 2**31 elements"))
    if a in _ONE_THREAD_PER_ROW else a
    for a in jm.SOFTMAX_ALGORITHMS
]


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", BIG_ALGORITHMS)
def test_big_softmax_forward(big, algorithm):
    gpu, x = big
    y = jax.jit(lambda t: jm.softmax(t, algorithm=algorithm))(x)
    assert y.shape == x.shape and y.dtype == jnp.bfloat16
    xr = _rows(x)
    mt.assert_close(_rows(y), mt.ref_softmax(xr), mt.FWD_TOL[mt.BF16], dtype=mt.BF16, what="rows of y")
    err, finite = _device_max_err(y, lambda t: jax.nn.softmax(t.astype(jnp.float32), axis=-1), x)
    assert finite, "non-finite entries in y"
    assert err <= 1e-6, f"some row deviates from XLA's float32 softmax: max(|d| - 1e-2|ref|) = {err}"
    sums = jax.jit(lambda t: jnp.max(jnp.abs(jnp.sum(t.astype(jnp.float32), axis=-1) - 1.0)))(y)
    assert float(sums) < 2e-2
    y.delete()


@pytest.mark.slow
def test_big_softmax_backward(big):
    gpu, x = big
    key = jax.device_put(jax.random.key(7), gpu)
    dy = jax.jit(lambda k: jax.random.normal(k, x.shape, jnp.float32).astype(jnp.bfloat16))(key)
    dx = jax.jit(lambda t, g: jax.vjp(jm.softmax, t)[1](g)[0])(x, dy)
    assert dx.shape == x.shape and dx.dtype == jnp.bfloat16
    xr, gr = _rows(x), _rows(dy)
    mt.assert_close(
        _rows(dx), mt.ref_softmax_vjp(xr, gr), mt.GRAD_TOL[mt.BF16], dtype=mt.BF16, what="rows of dx",
        mag=mt.ref_softmax_vjp_mag(xr, gr),
    )

    @jax.jit
    def check(d, t, g):
        y = jax.nn.softmax(t.astype(jnp.float32), axis=-1)
        gf = g.astype(jnp.float32)
        ref = y * (gf - jnp.sum(gf * y, axis=-1, keepdims=True))
        mag = y * (jnp.abs(gf) + jnp.sum(jnp.abs(gf) * y, axis=-1, keepdims=True))
        return jnp.max(jnp.abs(d.astype(jnp.float32) - ref) - 3e-2 * mag), jnp.all(jnp.isfinite(d))

    err, finite = check(dx, x, dy)
    assert bool(finite), "non-finite entries in dx"
    assert float(err) <= 1e-6, f"some row of dx deviates from XLA's float32 formula: {float(err)}"
    dx.delete()
    dy.delete()


# The cluster class of "auto" (a row over 8 CTAs of 1024 threads) past element 2**31: 16385 rows of
# 131072 bf16 elements (4 GiB per tensor).
CLUSTER_C = 131072
CLUSTER_N = 2**31 // CLUSTER_C + 1
CLUSTER_ROWS = np.array([0, 1, CLUSTER_N - 2, CLUSTER_N - 1])


@pytest.mark.slow
def test_big_softmax_cluster_class(gpu):
    key = jax.device_put(jax.random.key(11), gpu)
    kx, kg = jax.random.split(key)
    x = jax.jit(lambda k: (2.0 * jax.random.normal(k, (CLUSTER_N, CLUSTER_C), jnp.float32)).astype(jnp.bfloat16))(kx)
    dy = jax.jit(lambda k: jax.random.normal(k, (CLUSTER_N, CLUSTER_C), jnp.float32).astype(jnp.bfloat16))(kg)
    assert x.size > 2**31
    y, dx = jax.jit(lambda t, g: (lambda yv: (yv[0], yv[1](g)[0]))(jax.vjp(jm.softmax, t)))(x, dy)
    rows = jnp.asarray(CLUSTER_ROWS)
    xr, gr = np.asarray(x[rows]), np.asarray(dy[rows])
    mt.assert_close(np.asarray(y[rows]), mt.ref_softmax(xr), mt.FWD_TOL[mt.BF16], dtype=mt.BF16, what="rows of y")
    mt.assert_close(
        np.asarray(dx[rows]), mt.ref_softmax_vjp(xr, gr), mt.GRAD_TOL[mt.BF16], dtype=mt.BF16, what="rows of dx",
        mag=mt.ref_softmax_vjp_mag(xr, gr),
    )
    err, finite = _device_max_err(y, lambda t: jax.nn.softmax(t.astype(jnp.float32), axis=-1), x)
    assert finite, "non-finite entries in y"
    assert err <= 1e-6, f"some row of y deviates from XLA's float32 softmax: {err}"
    for a in (x, dy, y, dx):
        a.delete()
    gc.collect()


@pytest.mark.slow
def test_big_layer_norm_forward(big):
    gpu, x = big
    s, b, sd, bd = _params(gpu, 1)
    y = jax.jit(lambda t, s_, b_: jm.layer_norm(t, s_, b_))(x, sd, bd)
    assert y.shape == x.shape and y.dtype == jnp.bfloat16
    mt.assert_close(_rows(y), mt.ref_layer_norm(_rows(x), s, b), mt.FWD_TOL[mt.BF16], dtype=mt.BF16, what="rows of y")
    err, finite = _device_max_err(y, lambda t, s_, b_: mt.jnp_layer_norm(t.astype(jnp.float32), s_, b_), x, sd, bd)
    assert finite, "non-finite entries in y"
    assert err <= 1e-2, f"some row deviates from XLA's float32 layer_norm: max(|d| - 1e-2|ref|) = {err}"
    y.delete()


@pytest.mark.slow
def test_big_rms_norm_forward(big):
    gpu, x = big
    s, _, sd, _ = _params(gpu, 2)
    y = jax.jit(lambda t, s_: jm.rms_norm(t, s_))(x, sd)
    mt.assert_close(_rows(y), mt.ref_rms_norm(_rows(x), s), mt.FWD_TOL[mt.BF16], dtype=mt.BF16, what="rows of y")
    err, finite = _device_max_err(y, lambda t, s_: mt.jnp_rms_norm(t.astype(jnp.float32), s_), x, sd)
    assert finite and err <= 1e-2, (finite, err)
    y.delete()


@pytest.mark.slow
def test_big_gelu_forward(big):
    gpu, x = big
    s, b, sd, bd = _params(gpu, 3)
    y = jax.jit(lambda t, s_, b_: jm.scale_bias_gelu(t, s_, b_))(x, sd, bd)
    assert y.shape == x.shape and y.dtype == jnp.bfloat16
    xr = _rows(x)
    mag = mt.ref_scale_bias_gelu_mag(xr, s, b)
    mt.assert_close(_rows(y), mt.ref_scale_bias_gelu(xr, s, b), mt.FWD_TOL[mt.BF16], dtype=mt.BF16, what="rows of y", mag=mag)
    err, finite = _device_max_err(y, lambda t, s_, b_: mt.jnp_scale_bias_gelu(t.astype(jnp.float32), s_, b_), x, sd, bd)
    assert finite, "non-finite entries in y"
    assert err <= 1e-2, f"some entry deviates from XLA's float32 gelu: {err}"
    y.delete()
    # Python-number parameters, too
    y = jax.jit(lambda t: jm.scale_bias_gelu(t, 0.5, 0.25))(x)
    mag = mt.ref_scale_bias_gelu_mag(xr, 0.5, 0.25)
    mt.assert_close(_rows(y), mt.ref_scale_bias_gelu(xr, 0.5, 0.25), mt.FWD_TOL[mt.BF16], dtype=mt.BF16, mag=mag)
    y.delete()


# ----------------------------------------------------------------------------------------------
# determinism of the backward kernels
# ----------------------------------------------------------------------------------------------


def _twice(fn, *args):
    first = [np.asarray(a) for a in jax.tree_util.tree_leaves(fn(*args))]
    second = [np.asarray(a) for a in jax.tree_util.tree_leaves(fn(*args))]
    return first, second


@pytest.mark.parametrize("dtype", [mt.F32, mt.BF16], ids=["f32", "bf16"])
@pytest.mark.parametrize("shape", [(32771, 1024), (4099, 4097), (200003, 64)], ids=["32771x1024", "4099x4097", "200003x64"])
def test_layer_norm_backward_deterministic(gpu, shape, dtype):
    rng = np.random.default_rng(11)
    c = shape[-1]
    x, g = mt.randn(rng, shape, dtype), mt.randn(rng, shape, dtype, scale=1.0)
    s, b = mt.randn(rng, (c,), loc=1.0), mt.randn(rng, (c,))
    args = [jax.device_put(a, gpu) for a in (x, s, b, g)]
    fn = jax.jit(lambda x_, s_, b_, g_: jax.vjp(jm.layer_norm, x_, s_, b_)[1](g_))
    r1, r2 = _twice(fn, *args)
    for name, a, b_ in zip(("dx", "dscale", "dbias"), r1, r2):
        mt.assert_bitwise_equal(a, b_, name)
    # and it is right: dscale / dbias against the float64 reference
    _, rds, rdb = mt.ref_layer_norm_vjp(x, s, b, 1e-5, g)
    mt.assert_close(r1[1], rds, mt.GRAD_TOL[dtype], dtype=mt.F32, what="dscale")
    mt.assert_close(r1[2], rdb, mt.GRAD_TOL[dtype], dtype=mt.F32, what="dbias")


@pytest.mark.parametrize("shape", [(32771, 1024), (200003, 64)], ids=["32771x1024", "200003x64"])
def test_rms_norm_and_gelu_backward_deterministic(gpu, shape):
    rng = np.random.default_rng(12)
    c = shape[-1]
    x, g = mt.randn(rng, shape), mt.randn(rng, shape, scale=1.0)
    s, b = mt.randn(rng, (c,), loc=1.0), mt.randn(rng, (c,))
    xd, sd, bd, gd = (jax.device_put(a, gpu) for a in (x, s, b, g))
    rms = jax.jit(lambda x_, s_, g_: jax.vjp(jm.rms_norm, x_, s_)[1](g_))
    r1, r2 = _twice(rms, xd, sd, gd)
    for name, a, b_ in zip(("rms dx", "rms dscale"), r1, r2):
        mt.assert_bitwise_equal(a, b_, name)
    gelu = jax.jit(lambda x_, s_, b_, g_: jax.vjp(jm.scale_bias_gelu, x_, s_, b_)[1](g_))
    q1, q2 = _twice(gelu, xd, sd, bd, gd)
    for name, a, b_ in zip(("gelu dx", "gelu dscale", "gelu dbias"), q1, q2):
        mt.assert_bitwise_equal(a, b_, name)
    _, rds, rdb = mt.ref_scale_bias_gelu_vjp(x, s, b, g)
    mt.assert_close(q1[1], rds, mt.GRAD_TOL[mt.F32], dtype=mt.F32, what="gelu dscale")
    mt.assert_close(q1[2], rdb, mt.GRAD_TOL[mt.F32], dtype=mt.F32, what="gelu dbias")


def test_gpu_and_cpu_agree(gpu):
    """The same inputs on both platforms give close results (each is also checked against the
    reference elsewhere); catches a platform silently falling back to the other's kernels."""
    rng = np.random.default_rng(13)
    x = mt.randn(rng, (37, 1025), mt.BF16)
    s, b = mt.randn(rng, (1025,), loc=1.0), mt.randn(rng, (1025,))
    cpu = jax.devices("cpu")[0]
    for fn in (
        lambda x_, s_, b_: jm.softmax(x_),
        lambda x_, s_, b_: jm.layer_norm(x_, s_, b_),
        lambda x_, s_, b_: jm.rms_norm(x_, s_),
        lambda x_, s_, b_: jm.scale_bias_gelu(x_, s_, b_),
    ):
        on_gpu = jax.jit(fn)(*(jax.device_put(a, gpu) for a in (x, s, b)))
        on_cpu = jax.jit(fn)(*(jax.device_put(a, cpu) for a in (x, s, b)))
        assert on_gpu.devices() == {gpu} and on_cpu.devices() == {cpu}
        assert mt.rel_err(on_gpu, mt.f64(on_cpu)) < 1e-2
