"""GPU-only tests (skipped with a reason when JAX sees no GPU or jax_memops has no CUDA kernels):

* tensors of more than 2**31 elements (64-bit indexing) in bfloat16: softmax forward (every algorithm but the
  one-thread-per-row ones, v1 and v5, too slow there) and backward, layer_norm forward, rms_norm forward,
  scale_bias_gelu forward, forward mode (jvp) of the norms and GELU; in float32 the softmax forward's bulk-copy
  clusters (rows by tickets). The data is generated on the GPU (softmax "auto" also in its cluster class: 16385 rows
  of 131072, forward and backward); rows near the start, just before and beyond element 2**31 are checked against
  the float64 NumPy reference of those rows only, and every row is checked on the device against XLA's own float32
  formulation (max-error reductions, so nothing big comes back).
* bitwise determinism of the backward kernels (layer_norm, rms_norm, gelu with array params).
* the norms' size classes, forward and backward (the A/B switches' version scripts: test_norm_switches.py).

Memory stays well below 40 GB: x (4 GiB bf16) plus at most three tensors of the same size (f32: two of 8 GiB).
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


# Size classes of "auto" past element 2**31, bf16 (4 GiB per tensor): 16385 rows of 131072 (the forward
# runs the bulk-copy cluster through registers: v5's 16-bit plan, sm_90, int64 row offsets of its bulk
# copies and stores; the backward the register cluster, a row over 8 CTAs of 512 threads, its sums merged
# by messages), 42731 rows of 50257 (the forward's two-pass kernel with L2 as the row buffer, v14;
# misaligned rows: scalar heads and tails) and 2147484 rows of 1000 (the forward's sub-warp rows of 8 packs
# per thread, v23: 16 threads a row, the last one's packs partly beyond it); v38's backward clusters: 8193 rows of
# 262147 (13 CTAs of 512 threads, 5 packs of y and dy per thread; misaligned rows) and 3580 of 600001 (15 CTAs of
# 1024 threads, 5 packs; misaligned); v39's: 4097 of 524288 (16 CTAs of 512 threads holding 8 packs of y, dy read
# twice).
SIZE_CLASS_CASES = [131072, 50257, 1000, 262147, 524288, 600001]


@pytest.mark.slow
@pytest.mark.parametrize("cols", SIZE_CLASS_CASES)
def test_big_softmax_size_class(gpu, cols):
    n = 2**31 // cols + 1
    check_rows = np.array([0, 1, n - 2, n - 1])
    key = jax.device_put(jax.random.key(11), gpu)
    kx, kg = jax.random.split(key)
    x = jax.jit(lambda k: (2.0 * jax.random.normal(k, (n, cols), jnp.float32)).astype(jnp.bfloat16))(kx)
    dy = jax.jit(lambda k: jax.random.normal(k, (n, cols), jnp.float32).astype(jnp.bfloat16))(kg)
    assert x.size > 2**31
    y, dx = jax.jit(lambda t, g: (lambda yv: (yv[0], yv[1](g)[0]))(jax.vjp(jm.softmax, t)))(x, dy)
    rows = jnp.asarray(check_rows)
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


# The f32 bulk-copy clusters past element 2**31, whose rows past each cluster's first two come by tickets (since v75;
# since v77 the default's clusters twice the rule's size, since v79 on the register kernels; softmax_fwd_tma.cuh):
# 16385 rows of 131072 (8 GiB a tensor) and 42731 rows of 50257 (misaligned rows: scalar heads and tails). Forward
# only; the rows at both ends against float64, every row on the device against XLA.
@pytest.mark.slow
@pytest.mark.parametrize("cols", [131072, 50257])
def test_big_softmax_forward_f32(gpu, cols):
    n = 2**31 // cols + 1
    key = jax.device_put(jax.random.key(13), gpu)
    x = jax.jit(lambda k: 3.0 * jax.random.normal(k, (n, cols), jnp.float32))(key)
    assert x.size > 2**31
    y = jax.jit(jm.softmax)(x)
    rows = jnp.asarray([0, 1, n - 2, n - 1])
    mt.assert_close(np.asarray(y[rows]), mt.ref_softmax(np.asarray(x[rows])), mt.FWD_TOL[mt.F32], dtype=mt.F32,
                    what="rows of y")
    err, finite = _device_max_err(y, lambda t: jax.nn.softmax(t, axis=-1), x)
    assert finite, "non-finite entries in y"
    assert err <= 1e-6, f"some row of y deviates from XLA's float32 softmax: {err}"
    for a in (x, y):
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
def test_big_layer_norm_into_f32(big):
    """A bf16 x normalized into f32 (`dtype`: norm_fwd_mixed's register rows, then norm_bwd_general's fused backward
    reading an f32 dy) past element 2**31: rows of y and dx on both sides of it against float64, every row of y
    against XLA's float32 formula."""
    gpu, x = big
    s, b, sd, bd = _params(gpu, 5)
    y = jax.jit(lambda t, s_, b_: jm.layer_norm(t, s_, b_, dtype=jnp.float32))(x, sd, bd)
    assert y.dtype == jnp.float32
    mt.assert_close(_rows(y), mt.ref_layer_norm(_rows(x), s, b), mt.FWD_TOL[mt.F32] * 10, dtype=mt.F32,
                    what="rows of y")
    err, finite = _device_max_err(y, lambda t, s_, b_: mt.jnp_layer_norm(t.astype(jnp.float32), s_, b_), x, sd, bd)
    assert finite and err <= 1e-2, (finite, err)
    y.delete()
    dy = jax.jit(lambda k: jax.random.normal(k, x.shape, jnp.float32))(jax.device_put(jax.random.key(6), gpu))
    dx, _, _ = jax.jit(lambda t, s_, b_, g: jax.vjp(lambda *a: jm.layer_norm(*a, dtype=jnp.float32), t, s_, b_)[1](g))(
        x, sd, bd, dy)
    assert dx.dtype == jnp.bfloat16
    xr, gr = _rows(x), _rows(dy)
    rdx, _, _ = mt.ref_layer_norm_vjp(xr, s, b, 1e-5, gr)
    mt.assert_close(_rows(dx), rdx, mt.GRAD_TOL[mt.F32] * 10, dtype=mt.BF16, what="rows of dx",
                    mag=mt.ref_layer_norm_vjp_mag(xr, s, 1e-5, gr))
    for a in (dx, dy):
        a.delete()


# f32 rows past element 2**31 (8 GiB per tensor): 2**20 + 5 rows of 2048, v44's lean block rows with their parameters
# held, LayerNorm at 4 packs per thread (128 threads a row), RMSNorm at 3 (192; 64-bit row offsets), rows on both sides of element 2**31 checked
# against float64 and every row against XLA's float32 formula on the device.
@pytest.mark.slow
def test_big_norm_forward_f32(gpu):
    c = 2048
    n = 2**31 // c + 5
    key = jax.device_put(jax.random.key(29), gpu)
    x = jax.jit(lambda k: 2.0 * jax.random.normal(k, (n, c), jnp.float32) + 0.5)(key)
    assert x.size > 2**31
    rng = np.random.default_rng(29)
    s, b = mt.randn(rng, (c,), np.float32, scale=0.5, loc=1.0), mt.randn(rng, (c,), np.float32)
    sd, bd = jax.device_put(s, gpu), jax.device_put(b, gpu)
    beyond = 2**31 // c
    rows = jnp.asarray([0, 1, beyond - 1, beyond, n - 1])
    xr = np.asarray(x[rows])
    y = jax.jit(jm.layer_norm)(x, sd, bd)
    mt.assert_close(np.asarray(y[rows]), mt.ref_layer_norm(xr, s, b), mt.FWD_TOL[mt.F32], dtype=mt.F32, what="ln rows")
    err, finite = _device_max_err(y, lambda t, s_, b_: mt.jnp_layer_norm(t, s_, b_), x, sd, bd)
    assert finite and err <= 1e-4, (finite, err)
    y.delete()
    y = jax.jit(jm.rms_norm)(x, sd)
    mt.assert_close(np.asarray(y[rows]), mt.ref_rms_norm(xr, s), mt.FWD_TOL[mt.F32], dtype=mt.F32, what="rms rows")
    err, finite = _device_max_err(y, lambda t, s_: mt.jnp_rms_norm(t, s_), x, sd)
    assert finite and err <= 1e-4, (finite, err)
    y.delete()
    x.delete()
    gc.collect()


# The same tensor as rows of 128: team rows (LayerNorm: 6 packs per thread, norm_fwd_half_kernel's 32-bit row
# indices and 64-bit element offsets; RMSNorm: v3's), 2**24 + 96 rows, the last 96 wholly beyond element 2**31.
@pytest.mark.slow
def test_big_norm_team_rows(big):
    gpu, x = big
    c = 128
    xs = x.reshape(-1, c)
    beyond = 2**31 // c
    rows = np.array([0, 1, beyond - 1, beyond, beyond + 1, xs.shape[0] - 1])
    rng = np.random.default_rng(3)
    s, b = mt.randn(rng, (c,), np.float32, scale=0.5, loc=1.0), mt.randn(rng, (c,), np.float32)
    sd, bd = jax.device_put(s, gpu), jax.device_put(b, gpu)
    xr = np.asarray(xs[jnp.asarray(rows)])
    for name, ours, ref, dev_ref in (
            ("layer_norm", lambda t, p, q: jm.layer_norm(t, p, q), lambda t: mt.ref_layer_norm(t, s, b),
             lambda t, p, q: mt.jnp_layer_norm(t.astype(jnp.float32), p, q)),
            ("rms_norm", lambda t, p, q: jm.rms_norm(t, p), lambda t: mt.ref_rms_norm(t, s),
             lambda t, p, q: mt.jnp_rms_norm(t.astype(jnp.float32), p))):
        y = jax.jit(ours)(xs, sd, bd)
        mt.assert_close(np.asarray(y[jnp.asarray(rows)]), ref(xr), mt.FWD_TOL[mt.BF16], dtype=mt.BF16,
                        what=f"{name} rows of y")
        err, finite = _device_max_err(y, dev_ref, xs, sd, bd)
        assert finite and err <= 1e-2, (name, finite, err)
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


# Forward mode past element 2**31: the one-pass *_jvp kernels' 64-bit offsets. y and its tangent from the shared bf16 x
# and a tangent of its size (16 GiB in all); rows on both sides of element 2**31 against float64, every entry of y and
# of the tangent against XLA's float32 formula (its jax.jvp) on the device.
_BIG_JVP = {
    "layer_norm": (lambda a, s, b: jm.layer_norm(a, s, b), mt.jnp_layer_norm,
                   lambda x, s, b: (mt.ref_layer_norm(x, s, b), None),
                   lambda x, s, b, t, ts, tb: mt.ref_layer_norm_jvp(x, s, t, ts, tb)),
    "rms_norm": (lambda a, s, b: jm.rms_norm(a, s), lambda a, s, b: mt.jnp_rms_norm(a, s),
                 lambda x, s, b: (mt.ref_rms_norm(x, s), None),
                 lambda x, s, b, t, ts, tb: mt.ref_rms_norm_jvp(x, s, t, ts)),
    "gelu": (lambda a, s, b: jm.scale_bias_gelu(a, s, b), mt.jnp_scale_bias_gelu,
             lambda x, s, b: (mt.ref_scale_bias_gelu(x, s, b), mt.ref_scale_bias_gelu_mag(x, s, b)),
             mt.ref_scale_bias_gelu_jvp),
}


@pytest.mark.slow
@pytest.mark.parametrize("op", list(_BIG_JVP))
def test_big_jvp(big, op):
    gpu, x = big
    ours, formula, ref_y, ref_t = _BIG_JVP[op]
    s, b, sd, bd = _params(gpu, 7)
    ts, tb, tsd, tbd = _params(gpu, 8)
    t = jax.jit(lambda k: jax.random.normal(k, x.shape, jnp.float32).astype(jnp.bfloat16))(
        jax.device_put(jax.random.key(9), gpu))
    y, ty = jax.jit(lambda *a: jax.jvp(ours, a[:3], a[3:]))(x, sd, bd, t, tsd, tbd)
    assert y.dtype == ty.dtype == jnp.bfloat16 and ty.shape == x.shape
    xr, tr = _rows(x), _rows(t)
    want, mag = ref_y(xr, s, b)
    mt.assert_close(_rows(y), want, mt.FWD_TOL[mt.BF16], dtype=mt.BF16, what="rows of y", mag=mag)
    want, mag = ref_t(xr, s, b, tr, ts, tb)
    mt.assert_close(_rows(ty), want, mt.GRAD_TOL[mt.BF16], dtype=mt.BF16, what="rows of the tangent", mag=mag)

    def xla_jvp(a, s_, b_, ta, ts_, tb_):
        return jax.jvp(formula, (a.astype(jnp.float32), s_, b_), (ta.astype(jnp.float32), ts_, tb_))

    for i, (got, what) in enumerate(((y, "y"), (ty, "the tangent"))):
        err, finite = _device_max_err(got, lambda *a: xla_jvp(*a)[i], x, sd, bd, t, tsd, tbd)
        assert finite, f"non-finite entries in {what}"
        assert err <= 1e-2, f"some entry of {what} deviates from XLA's float32 jvp: {err}"
    for a in (y, ty, t):
        a.delete()
    gc.collect()


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


@pytest.mark.parametrize("op", ["layer_norm", "rms_norm"])
@pytest.mark.parametrize("shape", [(15881, 4096), (21851, 3072)], ids=["15881x4096", "21851x3072"])
def test_norm_backward_on_paired_blocks(gpu, op, shape, monkeypatch):
    """v30's workspace rule: 16-bit rows on teams of 256 threads get 264 partial rows (two 256-thread blocks per SM;
    GELU's rule, the norms' before, gives these shapes 132 and 170). The gradients against float64, bitwise the same
    run after run, and dx bitwise what the rule before gives (only the partials' grouping changed)."""
    from jax_memops._primitive import partial_rows

    assert partial_rows(shape[0], 1, 2, shape[1]) == 264 and partial_rows(shape[0], 1, 2) < 248
    rng = np.random.default_rng(shape[1])
    c = shape[-1]
    x, g = mt.randn(rng, shape, mt.BF16), mt.randn(rng, shape, mt.BF16, scale=1.0)
    s, b = mt.randn(rng, (c,), loc=1.0), mt.randn(rng, (c,))
    args = [jax.device_put(a, gpu) for a in (x, s, b, g)]

    def grads():
        if op == "layer_norm":
            return jax.jit(lambda x_, s_, b_, g_: jax.vjp(jm.layer_norm, x_, s_, b_)[1](g_))
        return jax.jit(lambda x_, s_, b_, g_: jax.vjp(jm.rms_norm, x_, s_)[1](g_))

    r1, r2 = _twice(grads(), *args)
    for name, u, v in zip(("dx", "dscale", "dbias"), r1, r2):
        mt.assert_bitwise_equal(u, v, name)
    ref = mt.ref_layer_norm_vjp(x, s, b, 1e-5, g) if op == "layer_norm" else mt.ref_rms_norm_vjp(x, s, 1e-6, g)
    mag = (mt.ref_layer_norm_vjp_mag(x, s, 1e-5, g) if op == "layer_norm" else mt.ref_rms_norm_vjp_mag(x, s, 1e-6, g))
    mt.assert_close(r1[0], ref[0], mt.GRAD_TOL[mt.BF16], dtype=mt.BF16, what=f"{op} dx", mag=mag)
    for name, u, v in zip(("dscale", "dbias"), r1[1:], ref[1:]):
        mt.assert_close(u, v, mt.GRAD_TOL[mt.BF16], dtype=mt.F32, what=f"{op} {name}")
    monkeypatch.setenv("JAX_MEMOPS_NORM_PARTIALS", "v29")
    before = [np.asarray(a) for a in jax.tree_util.tree_leaves(grads()(*args))]
    mt.assert_bitwise_equal(r1[0], before[0], "dx under the rule before")
    for name, u, v in zip(("dscale", "dbias"), r1[1:], before[1:]):
        mt.assert_close(u, v, 1e-5, dtype=mt.F32, what=f"{name} against the rule before")


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


# ----------------------------------------------------------------------------------------------
# one-pass backward kernels with [P x C] partials (norms: norm_bwd_fused_kernel, gelu:
# gelu_bwd_partials_kernel) and their fallbacks: every size class, rows < P, row groups (vmap)
# ----------------------------------------------------------------------------------------------

# (rows, C): rows < P; short rows with several teams per warp (C = 33 also unvectorized); vectorized
# mid sizes; C = 4095 unvectorized, the longest row the V = 1 fused kernel holds (4096); 4097 just
# beyond (norms: two-kernel fallback); 12288 = one 512-thread team per row (f32 K = 6, bf16 K = 3),
# gelu's two column tiles; 16384 the norms' long-row class (v17: 512 x 32 elements in f32, 512 x 48 in
# 16-bit; partials in shared memory), 24576 its 16-bit limit (f32: the two-kernel fallback), 24584 beyond
# it (fallback in every dtype), 12289 odd (gelu: 4 tiles).
# (16901, 2048): f32 P = 264, so the norms' fused backward runs 256-thread blocks (two per SM) of two
# 128-thread teams (shared-memory team sums); bf16 P = 132: 512-thread blocks of four.
# v3: 16-bit rows keep the partials in registers (norms: V = 8 and V = 1; gelu: every dtype) and gelu
# loads two rows per team at a time in 16-bit (a team's last pair may be incomplete: odd rows per block,
# rows < teams: (3, 7), (20001, 33), (1, 768)); f16 runs every shape too.
PARTIAL_SHAPES = [(37, 1024), (3, 7), (20001, 33), (6007, 1000), (4099, 4095), (999, 4097),
                  (1501, 12288), (333, 16384), (333, 12289), (16901, 2048), (1, 768), (8193, 768),
                  (203, 24576), (7, 24584)]


def _bwd_fns():
    return {
        "layer_norm": (lambda x, s, b, g: jax.vjp(jm.layer_norm, x, s, b)[1](g),
                       lambda x, s, b, g: mt.ref_layer_norm_vjp(x, s, b, 1e-5, g)),
        "rms_norm": (lambda x, s, b, g: jax.vjp(jm.rms_norm, x, s)[1](g),
                     lambda x, s, b, g: mt.ref_rms_norm_vjp(x, s, 1e-6, g)),
        "gelu": (lambda x, s, b, g: jax.vjp(jm.scale_bias_gelu, x, s, b)[1](g),
                 lambda x, s, b, g: mt.ref_scale_bias_gelu_vjp(x, s, b, g)),
    }


@pytest.mark.parametrize("dtype", [mt.F32, mt.BF16, mt.F16], ids=["f32", "bf16", "f16"])
@pytest.mark.parametrize("shape", PARTIAL_SHAPES, ids=["x".join(map(str, s)) for s in PARTIAL_SHAPES])
@pytest.mark.parametrize("op", ["layer_norm", "rms_norm", "gelu"])
def test_backward_partials(gpu, op, shape, dtype):
    rng = np.random.default_rng(14)
    c = shape[-1]
    x, g = mt.randn(rng, shape, dtype), mt.randn(rng, shape, dtype, scale=1.0)
    s, b = mt.randn(rng, (c,), loc=1.0), mt.randn(rng, (c,))
    ours, ref = _bwd_fns()[op]
    fn = jax.jit(ours)
    args = [jax.device_put(a, gpu) for a in (x, s, b, g)]
    r1, r2 = _twice(fn, *args)
    for i, (a, b_) in enumerate(zip(r1, r2)):
        mt.assert_bitwise_equal(a, b_, f"{op} output {i}")
    want = [w for w in ref(x, s, b, g) if w is not None]
    mt.assert_close(r1[0], want[0], mt.GRAD_TOL[dtype], dtype=dtype, what="dx",
                    mag=mt.ref_scale_bias_gelu_vjp_mag(x, s, b, g) if op == "gelu" else
                    mt.ref_layer_norm_vjp_mag(x, s, 1e-5, g) if op == "layer_norm" else
                    mt.ref_rms_norm_vjp_mag(x, s, 1e-6, g))
    for name, got, w in zip(("dscale", "dbias"), r1[1:], want[1:]):
        mt.assert_close(got, w, mt.GRAD_TOL[dtype], dtype=mt.F32, what=name)


@pytest.mark.parametrize("shape", [(3, 37, 1024), (4, 3, 12288), (2, 999, 33), (5, 1, 64)],
                         ids=["3x37x1024", "4x3x12288", "2x999x33", "5x1x64"])
@pytest.mark.parametrize("op", ["layer_norm", "rms_norm", "gelu"])
@pytest.mark.parametrize("dtype", [mt.F32, mt.BF16], ids=["f32", "bf16"])
def test_backward_partials_row_groups(gpu, op, shape, dtype):
    """vmap with batched parameters: G row groups, per-group partials must not mix (bf16: the register
    partials, gelu's row pairs straddling a group boundary)."""
    rng = np.random.default_rng(15)
    n, _, c = shape
    x, g = mt.randn(rng, shape, dtype), mt.randn(rng, shape, dtype, scale=1.0)
    s, b = mt.randn(rng, (n, c), loc=1.0), mt.randn(rng, (n, c))
    ours, ref = _bwd_fns()[op]
    fn = jax.jit(jax.vmap(ours))
    r1, r2 = _twice(fn, *(jax.device_put(a, gpu) for a in (x, s, b, g)))
    for i, (a, b_) in enumerate(zip(r1, r2)):
        mt.assert_bitwise_equal(a, b_, f"{op} output {i}")
    for k in range(n):
        want = [w for w in ref(x[k], s[k], b[k], g[k]) if w is not None]
        for name, got, w in zip(("dscale", "dbias"), r1[1:], want[1:]):
            mt.assert_close(got[k], w, mt.GRAD_TOL[dtype], dtype=mt.F32, what=f"{name}[{k}]")


@pytest.mark.slow
def test_big_layer_norm_backward(big):
    """The fused backward past element 2**31 (64-bit row offsets): dx rows and dscale/dbias."""
    gpu, x = big
    s, b, sd, bd = _params(gpu, 4)
    key = jax.device_put(jax.random.key(8), gpu)
    dy = jax.jit(lambda k: jax.random.normal(k, x.shape, jnp.float32).astype(jnp.bfloat16))(key)
    dx, ds, db = jax.jit(lambda t, s_, b_, g: jax.vjp(jm.layer_norm, t, s_, b_)[1](g))(x, sd, bd, dy)
    xr, gr = _rows(x), _rows(dy)
    rdx, _, _ = mt.ref_layer_norm_vjp(xr, s, b, 1e-5, gr)
    mt.assert_close(_rows(dx), rdx, mt.GRAD_TOL[mt.BF16], dtype=mt.BF16, what="rows of dx",
                    mag=mt.ref_layer_norm_vjp_mag(xr, s, 1e-5, gr))

    @jax.jit
    def sums(t, g):
        t32, g32 = t.astype(jnp.float32), g.astype(jnp.float32)
        mean = jnp.mean(t32, -1, keepdims=True)
        xhat = (t32 - mean) * jax.lax.rsqrt(jnp.mean(jnp.square(t32 - mean), -1, keepdims=True) + 1e-5)
        return jnp.sum(g32 * xhat, 0), jnp.sum(g32, 0), jnp.sum(jnp.abs(g32 * xhat), 0), jnp.sum(jnp.abs(g32), 0)

    rds, rdb, mds, mdb = (np.asarray(a, np.float64) for a in sums(x, dy))
    assert np.max(np.abs(np.asarray(ds) - rds) / (mds + 1)) < 1e-4
    assert np.max(np.abs(np.asarray(db) - rdb) / (mdb + 1)) < 1e-4
    for a in (dx, ds, db, dy):
        a.delete()


@pytest.mark.slow
@pytest.mark.parametrize("op,c,dtype", [("rms_norm", 8192, "bfloat16"), ("rms_norm", 12288, "bfloat16"),
                                        ("layer_norm", 12288, "bfloat16"), ("rms_norm", 12288, "float32"),
                                        ("layer_norm", 12288, "float32"), ("layer_norm", 4608, "bfloat16")])
def test_big_norm_backward_teams(gpu, op, c, dtype):
    """The norms' lean backward past element 2**31: v31's 256-thread teams of K = 4 packs (RMSNorm bf16 C = 8192),
    v32's 512-thread teams of K = 3 (bf16 12288: RMSNorm's partials in registers, LayerNorm's in shared memory by
    quads), v34's of K = 6 (f32 12288: the rows read from their stages, the partials in registers) and v35's 256-thread
    teams of K = 3 with a quarter of their slots empty (bf16 4608; since v36 by default two teams of 192 threads a
    block); rows of dx on both sides of it against float64, the parameter gradients against XLA's float32 column
    sums."""
    dtype = mt.F32 if dtype == "float32" else mt.BF16
    n = 2**31 // c + 3
    first_beyond = 2**31 // c
    rows = np.array([0, 1, first_beyond - 2, first_beyond - 1, first_beyond, first_beyond + 1, n - 1])
    key = jax.device_put(jax.random.key(31), gpu)
    x, dy = jax.jit(lambda k: tuple((jax.random.normal(kk, (n, c), jnp.float32) * sc).astype(dtype)
                                    for kk, sc in zip(jax.random.split(k), (2.0, 1.0))))(key)
    assert x.size > 2**31
    rng = np.random.default_rng(31)
    s, b = mt.randn(rng, (c,), np.float32, scale=0.5, loc=1.0), mt.randn(rng, (c,), np.float32)
    sd, bd = jax.device_put(s, gpu), jax.device_put(b, gpu)
    xr, gr = (np.asarray(a[jnp.asarray(rows)]) for a in (x, dy))
    if op == "rms_norm":
        dx, *grads = jax.jit(lambda t, s_, g: jax.vjp(jm.rms_norm, t, s_)[1](g))(x, sd, dy)
        rdx, _ = mt.ref_rms_norm_vjp(xr, s, 1e-6, gr)
        mag = mt.ref_rms_norm_vjp_mag(xr, s, 1e-6, gr)
    else:
        dx, *grads = jax.jit(lambda t, s_, b_, g: jax.vjp(jm.layer_norm, t, s_, b_)[1](g))(x, sd, bd, dy)
        rdx = mt.ref_layer_norm_vjp(xr, s, b, 1e-5, gr)[0]
        mag = mt.ref_layer_norm_vjp_mag(xr, s, 1e-5, gr)
    mt.assert_close(np.asarray(dx[jnp.asarray(rows)]), rdx, mt.GRAD_TOL[dtype], dtype=dtype, what="rows of dx",
                    mag=mag)

    @jax.jit
    def sums(t, g):  # dscale's column sums (and dbias's), each with the sums of magnitudes that scale its error
        t32, g32 = t.astype(jnp.float32), g.astype(jnp.float32)
        if op == "rms_norm":
            xhat = t32 * jax.lax.rsqrt(jnp.mean(jnp.square(t32), -1, keepdims=True) + 1e-6)
            return (jnp.sum(g32 * xhat, 0), jnp.sum(jnp.abs(g32 * xhat), 0)),
        mean = jnp.mean(t32, -1, keepdims=True)
        xhat = (t32 - mean) * jax.lax.rsqrt(jnp.mean(jnp.square(t32 - mean), -1, keepdims=True) + 1e-5)
        return (jnp.sum(g32 * xhat, 0), jnp.sum(jnp.abs(g32 * xhat), 0)), (jnp.sum(g32, 0), jnp.sum(jnp.abs(g32), 0))

    for got, (want, mag_) in zip(grads, sums(x, dy)):
        want, mag_ = np.asarray(want, np.float64), np.asarray(mag_, np.float64)
        assert np.max(np.abs(np.asarray(got) - want) / (mag_ + 1)) < 1e-4
    for a in (x, dy, dx, *grads):
        a.delete()


# ----------------------------------------------------------------------------------------------
# forward size classes (norm_rows.cuh): team rows (4-32 threads per row, several rows per warp),
# block rows (64-768 threads, one row per block), the v1 fallback beyond; each at its boundaries,
# with misaligned rows (C % 4 or C % 8 != 0: scalar head/tail, 16-byte body), enough rows that the
# persistent grid strides, single rows, a NaN row, a constant row
# ----------------------------------------------------------------------------------------------

# (rows, C), with the class each takes in f32 / in bf16 and f16:
#   (1, 1), (7, 3), (300, 33): team, tpr 4, edges only or mostly; (60001, 64): team tpr 4 (f32) / 4,
#   64 rows per block, > 1 row per block slot (grid strides); (8001, 768): team tpr 32 / 16, strides;
#   (300, 1001): team, misaligned rows; (257, 1024): team tpr 32 / 16; (129, 1027): the last f32 team
#   width (256 packs) / team; (129, 1028): f32 block rows of 64 / team; (65, 2048), (65, 2055): f32
#   block / the last bf16 team widths; (65, 2056): block / bf16 block rows of 64; (33, 4097): block,
#   misaligned; (700, 12288): block rows of 384 / 192, strides; (9, 12289); (5, 24576): the longest f32
#   block (768 threads); (5, 24580): f32 v1 fallback / block; (3, 49152): v1 / the longest 16-bit
#   block; (3, 50257): v1 fallback for all.
# v29's lean block rows (norm_fwd_lean.cuh's lean_block_packs; whole packs, one parameter row): f32 C = 1028..8192 at
# 3 packs ((129, 1028): the first, slots left empty; (65, 2048)), 4 ((65, 2056), (97, 4096) LayerNorm, (9, 6144),
# (5, 8192): every slot used) and RMSNorm's 2 ((65, 2056), (97, 4096)); (257, 1024) stays on v4; bf16 LayerNorm at 4
# ((65, 2056), (97, 4096)). v48's bf16 pair rows (norm_fwd_lean.cuh's lean_pair_plan: two rows per block, 512..1536
# packs; odd row counts leave the last block's second row empty): (97, 4096), (9, 6144), (5, 8192) and (9, 8200) at 3
# packs (RMSNorm 8200 / 6144 at 4), (7, 10000) at 4, (700, 12288) at 3 (RMSNorm 4).
FWD_CLASS_SHAPES = [(1, 1), (7, 3), (300, 33), (60001, 64), (8001, 768), (300, 1001), (257, 1024),
                    (129, 1027), (129, 1028), (65, 2048), (65, 2055), (65, 2056), (97, 4096), (33, 4097), (9, 6144),
                    (5, 8192), (9, 8200), (7, 10000), (700, 12288), (9, 12289), (5, 24576), (5, 24580), (3, 49152),
                    (3, 50257)]


@pytest.mark.parametrize("dtype", mt.DTYPES, ids=mt.DTYPE_IDS)
@pytest.mark.parametrize("shape", FWD_CLASS_SHAPES, ids=["x".join(map(str, s)) for s in FWD_CLASS_SHAPES])
@pytest.mark.parametrize("op", ["layer_norm", "rms_norm"])
def test_norm_forward_classes(gpu, op, shape, dtype):
    rng = np.random.default_rng(16)
    rows, c = shape
    x = mt.randn(rng, shape, mt.F32, scale=2.0, loc=0.5)
    if rows > 2:
        x[1, c // 2] = np.nan  # a NaN row
        x[2, :] = 1.25  # a constant row: LayerNorm gives y = bias
    x = x.astype(dtype)
    s, b = mt.randn(rng, (c,), loc=1.0), mt.randn(rng, (c,))
    if op == "layer_norm":
        y = jax.jit(jm.layer_norm)(*(jax.device_put(a, gpu) for a in (x, s, b)))
        ref = mt.ref_layer_norm(x, s, b)
    else:
        y = jax.jit(jm.rms_norm)(*(jax.device_put(a, gpu) for a in (x, s)))
        ref = mt.ref_rms_norm(x, s)
    assert y.shape == x.shape and y.dtype == x.dtype
    y = np.asarray(y)
    mt.assert_close(y, ref, mt.FWD_TOL[dtype], dtype=dtype)  # NaN rows must match too
    if rows > 2:
        assert np.isnan(mt.f64(y[1])).all(), "a NaN in a row must make the whole row NaN"
    # absent parameters (each instance of the bf16 lean rows: scale only, bias only, neither): the rows are
    # standardized (LayerNorm) / normalized (RMSNorm) and scaled / shifted by what is given
    if op == "layer_norm":
        for sp, bp, what in ((None, None, "without params"), (s, None, "scale only"), (None, b, "bias only")):
            y0 = jax.jit(jm.layer_norm)(*(None if a is None else jax.device_put(a, gpu) for a in (x, sp, bp)))
            mt.assert_close(y0, mt.ref_layer_norm(x, sp, bp), mt.FWD_TOL[dtype], dtype=dtype, what=f"y {what}")
    else:
        y0 = jax.jit(lambda t: jm.rms_norm(t))(jax.device_put(x, gpu))
        mt.assert_close(y0, mt.ref_rms_norm(x), mt.FWD_TOL[dtype], dtype=dtype, what="y without params")


@pytest.mark.parametrize("c", [33, 768, 1001, 2056, 4097, 12288, 24580])
def test_layer_norm_forward_classes_large_mean(gpu, c):
    """x = 1e4 + 1e-2 * noise, epsilon = 1e-12 in every class: y and (through the backward) the saved
    mean / rstd stay accurate."""
    rng = np.random.default_rng(17)
    x = (1e4 + 1e-2 * rng.standard_normal((37, c))).astype(np.float32)
    s, b = mt.randn(rng, (c,), loc=1.0), mt.randn(rng, (c,))
    g = mt.randn(rng, x.shape, scale=1.0)
    ln = lambda a, p, q: jm.layer_norm(a, p, q, epsilon=1e-12)  # noqa: E731
    args = [jax.device_put(a, gpu) for a in (x, s, b, g)]
    y = jax.jit(ln)(*args[:3])
    mt.assert_close(y, mt.ref_layer_norm(x, s, b, 1e-12), 1e-4, dtype=mt.F32)
    dx, ds, db = jax.jit(lambda x_, s_, b_, g_: jax.vjp(ln, x_, s_, b_)[1](g_))(*args)
    rdx, rds, rdb = mt.ref_layer_norm_vjp(x, s, b, 1e-12, g)
    mt.assert_close(dx, rdx, 1e-3, dtype=mt.F32, what="dx", mag=mt.ref_layer_norm_vjp_mag(x, s, 1e-12, g))
    mt.assert_close(ds, rds, 1e-3, dtype=mt.F32, what="dscale")


@pytest.mark.parametrize("shape", [(3, 5, 33), (2, 7, 1001), (2, 3, 4097), (4, 9, 1027)],
                         ids=["3x5x33", "2x7x1001", "2x3x4097", "4x9x1027"])
@pytest.mark.parametrize("dtype", [mt.F32, mt.BF16], ids=["f32", "bf16"])
def test_norm_forward_classes_row_groups(gpu, shape, dtype):
    """vmap with batched parameters: group g's parameter row starts at g*C floats, not 16-byte aligned
    when C % 4 != 0 (scalar parameter loads), whatever the row's own alignment."""
    rng = np.random.default_rng(18)
    n, _, c = shape
    x = mt.randn(rng, shape, dtype)
    s, b = mt.randn(rng, (n, c), loc=1.0), mt.randn(rng, (n, c))
    y = jax.jit(jax.vmap(jm.layer_norm))(*(jax.device_put(a, gpu) for a in (x, s, b)))
    r = jax.jit(jax.vmap(jm.rms_norm))(*(jax.device_put(a, gpu) for a in (x, s)))
    for k in range(n):
        mt.assert_close(y[k], mt.ref_layer_norm(x[k], s[k], b[k]), mt.FWD_TOL[dtype], dtype=dtype, what=f"y[{k}]")
        mt.assert_close(r[k], mt.ref_rms_norm(x[k], s[k]), mt.FWD_TOL[dtype], dtype=dtype, what=f"rms y[{k}]")
