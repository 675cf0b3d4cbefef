"""jm.scale_bias_gelu: gelu_tanh(x * scale + bias) forward and backward against the float64 NumPy
reference, with scale/bias as Python numbers (static) or (C,) arrays (differentiable, any float
dtype), on every device and dtype, odd shapes, extreme values, empty inputs and stale outputs."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_memops as jm
import memops_testing as mt
from memops_testing import SHAPE_IDS, SHAPES
from memops_testing import DTYPE_IDS, DTYPES, FWD_TOL, GRAD_TOL


# How scale and bias are given: Python numbers (static) or (C,) arrays.
KINDS = ["default", "numbers", "int-number", "arrays", "array-scale", "array-bias"]


def _scale_bias(rng, c, kind, pdtype=np.float32):
    if kind == "default":
        return 1.0, 0.0
    if kind == "numbers":
        return 1.7, -0.35
    if kind == "int-number":
        return 2, -1
    s = mt.randn(rng, (c,), pdtype, scale=0.7, loc=1.0)
    b = mt.randn(rng, (c,), pdtype, scale=0.8)
    if kind == "arrays":
        return s, b
    if kind == "array-scale":
        return s, 0.25
    if kind == "array-bias":
        return 0.8, b
    raise AssertionError(kind)


def _is_num(p):
    return isinstance(p, (int, float))


def _put(p, device):
    return p if _is_num(p) else jax.device_put(p, device)


_JIT_CACHE = {}


def gelu_fns(scale, bias):
    """Jitted forward and VJP for the given scale/bias kinds; numbers are closed over (static)."""
    key = (scale if _is_num(scale) else "arr", bias if _is_num(bias) else "arr")
    if key in _JIT_CACHE:
        return _JIT_CACHE[key]
    sn, bn = _is_num(scale), _is_num(bias)

    def call(x, s, b):
        return jm.scale_bias_gelu(x, scale if sn else s, bias if bn else b)

    @jax.jit
    def fwd(x, s, b):
        return call(x, s, b)

    @jax.jit
    def vjp(x, s, b, g):
        if sn and bn:
            y, f = jax.vjp(lambda a: call(a, None, None), x)
            return y, (f(g)[0], None, None)
        if sn:
            y, f = jax.vjp(lambda a, b_: call(a, None, b_), x, b)
            dx, db = f(g)
            return y, (dx, None, db)
        if bn:
            y, f = jax.vjp(lambda a, s_: call(a, s_, None), x, s)
            dx, ds = f(g)
            return y, (dx, ds, None)
        y, f = jax.vjp(call, x, s, b)
        return y, f(g)

    fns = (
        lambda x, s, b: fwd(x, None if sn else s, None if bn else b),
        lambda x, s, b, g: vjp(x, None if sn else s, None if bn else b, g),
    )
    _JIT_CACHE[key] = fns
    return fns


def _check_out(out, x, device):
    assert out.shape == x.shape
    assert out.dtype == x.dtype, f"output dtype {out.dtype} != input dtype {x.dtype}"
    assert out.devices() == {device}, f"output on {out.devices()}, expected {device}"


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
def test_forward(device, rng, shape, dtype):
    x = mt.randn(rng, shape, dtype, scale=2.0)
    s, b = _scale_bias(rng, shape[-1], "arrays")
    fwd, _ = gelu_fns(s, b)
    out = fwd(jax.device_put(x, device), _put(s, device), _put(b, device))
    _check_out(out, x, device)
    mt.assert_finite(out)
    mt.assert_close(out, mt.ref_scale_bias_gelu(x, s, b), FWD_TOL[dtype], dtype=dtype, mag=mt.ref_scale_bias_gelu_mag(x, s, b))


# 8x33: C % 8 != 0 but 8 | size, so with number scale/bias the CUDA kernels take 16-byte packs of the flat
# tensor (ParamMode kScalars), with arrays one element at a time.
KIND_SHAPES = [(6, 33), (8, 33), (2, 3, 1000)]
KIND_SHAPE_IDS = ["x".join(map(str, s)) for s in KIND_SHAPES]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("shape", KIND_SHAPES, ids=KIND_SHAPE_IDS)
def test_forward_scale_bias_kinds(device, rng, shape, dtype, kind):
    x = mt.randn(rng, shape, dtype, scale=2.0)
    s, b = _scale_bias(rng, shape[-1], kind)
    fwd, _ = gelu_fns(s, b)
    out = fwd(jax.device_put(x, device), _put(s, device), _put(b, device))
    _check_out(out, x, device)
    mt.assert_close(out, mt.ref_scale_bias_gelu(x, s, b), FWD_TOL[dtype], dtype=dtype, mag=mt.ref_scale_bias_gelu_mag(x, s, b))


def test_defaults_and_eager(device, rng):
    x = mt.randn(rng, (3, 45))
    xd = jax.device_put(x, device)
    for args, kwargs in (((), {}), ((0.5, 1.5), {}), ((), {"scale": -2.0, "bias": 0.5})):
        out = jm.scale_bias_gelu(xd, *args, **kwargs)
        s, b = args or (kwargs.get("scale", 1.0), kwargs.get("bias", 0.0))
        mag = mt.ref_scale_bias_gelu_mag(x, s, b)
        mt.assert_close(out, mt.ref_scale_bias_gelu(x, s, b), FWD_TOL[mt.F32], dtype=mt.F32, mag=mag)


def test_numpy_input(rng):
    x = mt.randn(rng, (3, 10))
    s = mt.randn(rng, (10,))
    mt.assert_close(
        jm.scale_bias_gelu(x, s, 0.1), mt.ref_scale_bias_gelu(x, s, 0.1), FWD_TOL[mt.F32], dtype=mt.F32,
        mag=mt.ref_scale_bias_gelu_mag(x, s, 0.1),
    )


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_extreme_values(device, dtype):
    """Large |u| (tanh saturation, u^3 huge): exact limits gelu(u) -> u and -> 0, no NaN/inf; the
    gradient tends to 1 and 0."""
    big = [3.0, 5.0, 10.0, 30.0, 100.0, 1e3, 1e4]
    if dtype != mt.F16:
        big += [1e6, 1e12, 1e30]
    vals = np.array([0.0, -0.0, 1e-3, -1e-3, -0.75] + big + [-v for v in big], np.float32)
    x = vals.astype(dtype)[None, :]
    fwd, vjp = gelu_fns(1.0, 0.0)
    xd = jax.device_put(x, device)
    out = fwd(xd, 1.0, 0.0)
    mt.assert_finite(out)
    mt.assert_close(out, mt.ref_scale_bias_gelu(x), FWD_TOL[dtype], dtype=dtype, mag=mt.ref_scale_bias_gelu_mag(x))
    # gradient up to |u| = 1e12 (beyond, u^2 overflows float32 in any plain formulation)
    x = x[:, np.abs(vals) <= 1e12]
    g = np.ones_like(x)
    _, (dx, _, _) = vjp(jax.device_put(x, device), 1.0, 0.0, jax.device_put(g, device))
    mt.assert_finite(dx, "dx")
    ref = mt.ref_scale_bias_gelu_vjp(x, 1.0, 0.0, g)[0]
    mt.assert_close(dx, ref, GRAD_TOL[dtype], dtype=dtype, what="dx", mag=mt.ref_scale_bias_gelu_vjp_mag(x, 1.0, 0.0, g))


# u across the curve and deep into both tails, where gelu' is exactly 0 or 1 and gelu'' exactly 0 in float64.
TAIL_U = [-1e5, -1e3, -40.0, -13.3, -9.0, -5.0, -2.0, -0.5, 0.0, 0.3, 1.0, 3.0, 5.0, 9.0, 40.0, 1e3, 1e5]


def _ref_gelu_second(u, h=1e-6):
    """gelu''(u) in float64 by central differences of the float64 gelu' (error ~1e-10 here)."""
    return (mt.ref_gelu_grad(u + h) - mt.ref_gelu_grad(u - h)) / (2 * h)


def test_derivatives_in_the_tails(device, rng):
    """gelu' and gelu'' along every route to them: the kernels (jvp, grad) and the jax.numpy tangent map and backward
    (jacfwd's batched tangents, linearize, derivatives of the backward). The jax.numpy routes use the kernels' sigmoid
    form: autodiff of jax.nn.gelu's tanh form, jitted, read ~2e-4 for gelu' at u = -40 and -2e6 at u = -1e5 on the
    CPU (XLA's float32 tanh near +-1), where the true value is 0."""
    u = np.array([TAIL_U, [-v for v in TAIL_U]], np.float32)
    s, b = np.ones(u.shape[1], np.float32), np.zeros(u.shape[1], np.float32)
    f = lambda x, s, b: jm.scale_bias_gelu(x, s, b)
    xd, sd, bd, td = jax.device_put((u, s, b, mt.randn(rng, u.shape)), device)
    want1, want2 = mt.ref_gelu_grad(u), _ref_gelu_second(mt.f64(u))
    n = u.size
    firsts = {
        "jvp": jax.jit(lambda x, t: jax.jvp(lambda a: f(a, sd, bd), (x,), (t,))[1])(xd, td),
        "linearize": jax.jit(lambda x, t: jax.linearize(lambda a: f(a, sd, bd), x)[1](t))(xd, td),
        "grad": jax.jit(jax.grad(lambda x, t: jnp.sum(f(x, sd, bd) * t)))(xd, td),
        "jacfwd": jnp.diagonal(jax.jit(jax.jacfwd(lambda x: f(x, sd, bd)))(xd).reshape(n, n)).reshape(u.shape),
        "jacrev": jnp.diagonal(jax.jit(jax.jacrev(lambda x: f(x, sd, bd)))(xd).reshape(n, n)).reshape(u.shape),
    }
    for what, got in firsts.items():
        want = want1 * (1.0 if what.startswith("jac") else mt.f64(td))
        err = np.max(np.abs(mt.f64(got) - want))
        assert err < 2e-6, f"{what}: gelu' off by {err:.2e}"
    total = lambda x: jnp.sum(f(x, sd, bd))
    seconds = {
        "jacfwd of grad": jax.jit(jax.jacfwd(jax.grad(total)))(xd),
        "hessian": jax.jit(jax.hessian(total))(xd),
        "grad of grad": jax.jit(jax.jacrev(jax.grad(total)))(xd),
    }
    for what, got in seconds.items():
        err = np.max(np.abs(np.diagonal(mt.f64(got).reshape(n, n)).reshape(u.shape) - want2))
        assert err < 2e-5, f"{what}: gelu'' off by {err:.2e}"
    # the scale's second derivative sums x^2 gelu''(u) over the rows: the tails add nothing
    d2s = jax.jit(jax.hessian(lambda s: jnp.sum(f(xd, s, bd))))(sd)
    np.testing.assert_allclose(np.diagonal(mt.f64(d2s)), np.sum(mt.f64(u) ** 2 * want2, axis=0), atol=1e-3, rtol=1e-5)


# ----------------------------------------------------------------------------------------------
# backward
# ----------------------------------------------------------------------------------------------


def _check_grads(x, s, b, g, got, dtype):
    dx, ds, db = got
    rdx, rds, rdb = mt.ref_scale_bias_gelu_vjp(x, s, b, g)
    mt.assert_finite(dx, "dx")
    assert dx.dtype == x.dtype and dx.shape == x.shape
    mt.assert_close(dx, rdx, GRAD_TOL[dtype], dtype=dtype, what="dx", mag=mt.ref_scale_bias_gelu_vjp_mag(x, s, b, g))
    if not _is_num(s):
        assert ds.shape == s.shape and ds.dtype == s.dtype, (ds.shape, ds.dtype)
        mt.assert_close(ds, rds, max(GRAD_TOL[dtype], GRAD_TOL[s.dtype]), dtype=s.dtype, what="dscale")
    if not _is_num(b):
        assert db.shape == b.shape and db.dtype == b.dtype, (db.shape, db.dtype)
        mt.assert_close(db, rdb, max(GRAD_TOL[dtype], GRAD_TOL[b.dtype]), dtype=b.dtype, what="dbias")


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
def test_grad(device, rng, shape, dtype):
    x = mt.randn(rng, shape, dtype, scale=2.0)
    s, b = _scale_bias(rng, shape[-1], "arrays")
    g = mt.randn(rng, shape, dtype, scale=1.0)
    _, vjp = gelu_fns(s, b)
    y, grads = vjp(jax.device_put(x, device), _put(s, device), _put(b, device), jax.device_put(g, device))
    _check_out(y, x, device)
    _check_out(grads[0], x, device)
    _check_grads(x, s, b, g, grads, dtype)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("shape", [(5, 3, 40), (8, 33)], ids=["5x3x40", "8x33"])
def test_grad_scale_bias_kinds(device, rng, shape, dtype, kind):
    x = mt.randn(rng, shape, dtype, scale=2.0)
    s, b = _scale_bias(rng, shape[-1], kind)
    g = mt.randn(rng, x.shape, dtype, scale=1.0)
    _, vjp = gelu_fns(s, b)
    _, grads = vjp(jax.device_put(x, device), _put(s, device), _put(b, device), jax.device_put(g, device))
    _check_grads(x, s, b, g, grads, dtype)


# Rows longer than a piece of the CPU handlers' work (2^15 elements): the forward and dx split each row into column
# tiles (cpp/cpu_common.h parallel_tiles), whose parameters start at the tile's column; a 1-D x is one such row.
TILE_SHAPES = [(98309,), (2, 70001), (3, 32769)]


@pytest.mark.parametrize("kind", ["numbers", "arrays", "array-bias"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("shape", TILE_SHAPES, ids=["x".join(map(str, s)) for s in TILE_SHAPES])
def test_rows_in_column_tiles(device, rng, shape, dtype, kind):
    x = mt.randn(rng, shape, dtype, scale=2.0)
    s, b = _scale_bias(rng, shape[-1], kind)
    g = mt.randn(rng, shape, dtype, scale=1.0)
    fwd, vjp = gelu_fns(s, b)
    xd, sd, bd = jax.device_put(x, device), _put(s, device), _put(b, device)
    out = fwd(xd, sd, bd)
    _check_out(out, x, device)
    mt.assert_close(out, mt.ref_scale_bias_gelu(x, s, b), FWD_TOL[dtype], dtype=dtype,
                    mag=mt.ref_scale_bias_gelu_mag(x, s, b))
    _, grads = vjp(xd, sd, bd, jax.device_put(g, device))
    _check_out(grads[0], x, device)
    _check_grads(x, s, b, g, grads, dtype)


# Short rows, many of them, over several pieces of the CPU handlers' work: with numbers for scale and bias the handlers
# take x as one row in column tiles (cpp/gelu_cpu.cc elementwise_shape), with arrays row by row.
SHORT_SHAPES = [(100003, 1), (40009, 3), (2, 5, 7)]


@pytest.mark.parametrize("kind", ["numbers", "arrays"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("shape", SHORT_SHAPES, ids=["x".join(map(str, s)) for s in SHORT_SHAPES])
def test_short_rows(device, rng, shape, dtype, kind):
    """Forward, backward and forward mode against float64; with numbers on the CPU, the bits of the row-by-row path
    (the same numbers as arrays of C entries)."""
    x, t = mt.randn(rng, shape, dtype, scale=2.0), mt.randn(rng, shape, dtype, scale=1.0)
    s, b = _scale_bias(rng, shape[-1], kind)
    g = mt.randn(rng, shape, dtype, scale=1.0)
    fwd, vjp = gelu_fns(s, b)
    xd, td, sd, bd = jax.device_put(x, device), jax.device_put(t, device), _put(s, device), _put(b, device)
    out = fwd(xd, sd, bd)
    _check_out(out, x, device)
    mt.assert_close(out, mt.ref_scale_bias_gelu(x, s, b), FWD_TOL[dtype], dtype=dtype,
                    mag=mt.ref_scale_bias_gelu_mag(x, s, b))
    _, grads = vjp(xd, sd, bd, jax.device_put(g, device))
    _check_grads(x, s, b, g, grads, dtype)
    _, ty = jax.jit(lambda a, u: jax.jvp(lambda z: jm.scale_bias_gelu(z, s if _is_num(s) else sd,
                                                                      b if _is_num(b) else bd), (a,), (u,)))(xd, td)
    want, mag = mt.ref_scale_bias_gelu_jvp(x, s, b, t)
    mt.assert_close(ty, want, GRAD_TOL[dtype], dtype=dtype, what="tangent", mag=mag)
    if kind == "numbers" and device.platform == "cpu":
        rows_fwd, rows_vjp = gelu_fns(*(np.full(shape[-1], p, np.float32) for p in (s, b)))
        sa, ba = (jax.device_put(np.full(shape[-1], p, np.float32), device) for p in (s, b))
        mt.assert_bitwise_equal(out, rows_fwd(xd, sa, ba), "y")
        mt.assert_bitwise_equal(grads[0], rows_vjp(xd, sa, ba, jax.device_put(g, device))[1][0], "dx")


@pytest.mark.parametrize("pdtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_scalar_array_params(device, rng, dtype, pdtype):
    """scale and bias as arrays of shape () (traced under jit: a learned scalar): one value for every column, and
    gradients of shape () in their dtype, the sums over the columns of the per-feature gradients."""
    c = 45
    x = mt.randn(rng, (3, 5, c), dtype, scale=2.0)
    g = mt.randn(rng, x.shape, dtype, scale=1.0)
    s = mt.randn(rng, (), pdtype, scale=0.3, loc=1.2)
    b = mt.randn(rng, (), pdtype, scale=0.5)
    xd, sd, bd, gd = (jax.device_put(a, device) for a in (x, s, b, g))
    y, back = jax.jit(lambda *a: jax.vjp(jm.scale_bias_gelu, *a))(xd, sd, bd)
    dx, ds, db = jax.jit(back)(gd)
    s_c, b_c = np.full(c, mt.f64(s)), np.full(c, mt.f64(b))  # the same parameters as (C,) arrays
    _check_out(y, x, device)
    mt.assert_close(y, mt.ref_scale_bias_gelu(x, s_c, b_c), FWD_TOL[dtype], dtype=dtype,
                    mag=mt.ref_scale_bias_gelu_mag(x, s_c, b_c))
    rdx, rds, rdb = mt.ref_scale_bias_gelu_vjp(x, s_c, b_c, g)
    mt.assert_close(dx, rdx, GRAD_TOL[dtype], dtype=dtype, what="dx", mag=mt.ref_scale_bias_gelu_vjp_mag(x, s_c, b_c, g))
    tol = max(GRAD_TOL[dtype], GRAD_TOL[pdtype])
    for name, got, want, p in (("dscale", ds, rds, s), ("dbias", db, rdb, b)):
        assert got.shape == () and got.dtype == p.dtype, (name, got.shape, got.dtype)
        mt.assert_close(np.reshape(mt.f64(got), (1,)), [want.sum()], tol, dtype=pdtype, what=name)
    # eagerly, a scalar array gives what the same value as a (C,) array gives
    np.testing.assert_array_equal(np.asarray(jm.scale_bias_gelu(xd, sd, 0.5)),
                                  np.asarray(jm.scale_bias_gelu(xd, jnp.broadcast_to(sd, (c,)), 0.5)))


@pytest.mark.parametrize("pdtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_param_dtypes(device, rng, dtype, pdtype):
    """Array scale/bias of any float dtype: output in x's dtype, gradients in the params' dtypes."""
    x = mt.randn(rng, (4, 37), dtype)
    s, b = _scale_bias(rng, 37, "arrays", pdtype)
    g = mt.randn(rng, x.shape, dtype, scale=1.0)
    _, vjp = gelu_fns(s, b)
    y, grads = vjp(*(jax.device_put(a, device) for a in (x, s, b, g)))
    assert y.dtype == x.dtype
    mt.assert_close(y, mt.ref_scale_bias_gelu(x, s, b), FWD_TOL[dtype], dtype=dtype, mag=mt.ref_scale_bias_gelu_mag(x, s, b))
    _check_grads(x, s, b, g, grads, dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("kind", ["arrays", "numbers"])
def test_grad_matches_xla(device, rng, dtype, kind):
    """jax.grad of sum(gelu(...) * w) equals jax.grad of the pure-jnp formulation in float32."""
    shape = (6, 3, 50)
    x = mt.randn(rng, shape, dtype, scale=2.0)
    s, b = _scale_bias(rng, 50, kind)
    w = mt.randn(rng, shape, np.float32, scale=1.0)
    xd, wd = jax.device_put(x, device), jax.device_put(w, device)
    tol = {mt.F32: 1e-5, mt.BF16: 3e-2, mt.F16: 5e-3}[dtype]
    if kind == "numbers":
        got = jax.jit(jax.grad(lambda t, w: jnp.sum(jm.scale_bias_gelu(t, s, b).astype(jnp.float32) * w)))(xd, wd)
        want = jax.jit(jax.grad(lambda t, w: jnp.sum(mt.jnp_scale_bias_gelu(t.astype(jnp.float32), s, b) * w)))(xd, wd)
        pairs = [("dx", got, want)]
    else:
        sd, bd = jax.device_put(s, device), jax.device_put(b, device)
        got = jax.jit(jax.grad(lambda *a: jnp.sum(jm.scale_bias_gelu(*a[:3]).astype(jnp.float32) * a[3]), argnums=(0, 1, 2)))(xd, sd, bd, wd)
        want = jax.jit(
            jax.grad(lambda t, s_, b_, w: jnp.sum(mt.jnp_scale_bias_gelu(t.astype(jnp.float32), s_, b_) * w), argnums=(0, 1, 2))
        )(xd, sd, bd, wd)
        pairs = list(zip(("dx", "dscale", "dbias"), got, want))
    for name, a, w_ in pairs:
        assert a.dtype == (x.dtype if name == "dx" else np.float32), (name, a.dtype)
        w64 = mt.f64(w_)
        assert mt.rel_err(a, w64) < tol + 2 * mt.rel_err(mt.round_to(w64, a.dtype), w64), name


# ----------------------------------------------------------------------------------------------
# empty inputs, stale outputs
# ----------------------------------------------------------------------------------------------

EMPTY_SHAPES = [(0, 8), (4, 0), (2, 0, 3), (0,)]


@pytest.mark.parametrize("kind", ["numbers", "arrays"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("shape", EMPTY_SHAPES, ids=["x".join(map(str, s)) for s in EMPTY_SHAPES])
def test_empty(device, rng, shape, dtype, kind):
    c = shape[-1]
    x = np.zeros(shape, dtype)
    s, b = _scale_bias(rng, c, kind)
    fwd, vjp = gelu_fns(s, b)
    xd = jax.device_put(x, device)
    out = fwd(xd, _put(s, device), _put(b, device))
    assert out.shape == shape and out.dtype == x.dtype
    y, (dx, ds, db) = vjp(xd, _put(s, device), _put(b, device), xd)
    assert dx.shape == shape and dx.dtype == x.dtype
    if kind == "arrays":
        assert ds.shape == (c,) and db.shape == (c,)
        np.testing.assert_array_equal(mt.f64(ds), 0.0)
        np.testing.assert_array_equal(mt.f64(db), 0.0)


@pytest.mark.parametrize("kind", ["numbers", "arrays"])
@pytest.mark.parametrize("shape", [(7, 33), (3, 4097)], ids=["7x33", "3x4097"])
def test_stale_and_poisoned_outputs(device, rng, shape, kind):
    c = shape[-1]
    for _ in range(2):
        mt.poison(device, shape)
        x = mt.randn(rng, shape, np.float32)
        s, b = _scale_bias(rng, c, kind)
        g = mt.randn(rng, shape, np.float32, scale=1.0)
        fwd, vjp = gelu_fns(s, b)
        args = (jax.device_put(x, device), _put(s, device), _put(b, device))
        y = fwd(*args)
        mt.assert_finite(y, "y")
        mag = mt.ref_scale_bias_gelu_mag(x, s, b)
        mt.assert_close(y, mt.ref_scale_bias_gelu(x, s, b), FWD_TOL[mt.F32], dtype=mt.F32, what="y", mag=mag)
        y2, grads = vjp(*args, jax.device_put(g, device))
        mt.assert_close(y2, mt.ref_scale_bias_gelu(x, s, b), FWD_TOL[mt.F32], dtype=mt.F32, what="y (vjp)", mag=mag)
        _check_grads(x, s, b, g, grads, mt.F32)


# JAX_MEMOPS_GRID (read once per process, hence a fresh interpreter): the elementwise kernels (gelu
# forward, the backward without parameter gradients, the three unfused pieces) under the capped
# grid-stride grid (persistent) and a full grid (one block per 256 threads' batch of packs, the default),
# against the float64 reference: 16-byte packs with a partial last block (4097 x 1024, 33 x 4096),
# unvectorized odd sizes (3 x 1000003, 7 x 33), one element. (The chain rounds x * s and u + b to the
# dtype, hence its wider tolerance, as in test_unfused.)
_GRID_SCRIPT = r"""
import jax, numpy as np, jax_memops as jm, sys
sys.path.insert(0, {tests!r})
import memops_testing as mt
from jax_memops import unfused
rng = np.random.default_rng(0)
gpu = jax.devices("gpu")[0]
for dtype in mt.DTYPES:
    for shape in [(4097, 1024), (33, 4096), (3, 1000003), (7, 33), (1, 1)]:
        x = mt.randn(rng, shape, np.float32, scale=2.0).astype(dtype)
        g = mt.randn(rng, shape, dtype, scale=1.0)
        xd, gd = jax.device_put(x, gpu), jax.device_put(g, gpu)
        what = f"{{dtype}} {{shape}}"
        y, back = jax.vjp(lambda v: jm.scale_bias_gelu(v, 1.7, -0.35), xd)
        mag = mt.ref_scale_bias_gelu_mag(x, 1.7, -0.35)
        mt.assert_close(y, mt.ref_scale_bias_gelu(x, 1.7, -0.35), mt.FWD_TOL[dtype], dtype=dtype, what="y " + what,
                        mag=mag)
        dx = back(gd)[0]
        ref_dx = mt.ref_scale_bias_gelu_vjp(x, 1.7, -0.35, g)[0]
        mt.assert_close(dx, ref_dx, mt.GRAD_TOL[dtype], dtype=dtype, what="dx " + what,
                        mag=mt.ref_scale_bias_gelu_vjp_mag(x, 1.7, -0.35, g))
        chain = jax.jit(lambda v: unfused.three_kernels(v, 1.7, -0.35))(xd)
        mt.assert_close(chain, mt.ref_scale_bias_gelu(x, 1.7, -0.35), 4 * mt.FWD_TOL[dtype], dtype=dtype,
                        what="three kernels " + what, mag=mag)
print("OK")
"""


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize("grid", ["persistent", "full"])
def test_gpu_elementwise_grid(gpu, grid):
    mt.run_script(_GRID_SCRIPT, 600, env={"JAX_MEMOPS_GRID": grid}, compile_cache=True)
