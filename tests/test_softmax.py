"""jm.softmax: forward and backward against the float64 NumPy reference, on every device, dtype,
algorithm, axis and odd shape; masking (-inf), NaN rows, huge logits, empty inputs, stale outputs."""

from __future__ import annotations

import functools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_memops as jm
import memops_testing as mt
from memops_testing import SHAPE_IDS, SHAPES
from memops_testing import DTYPE_IDS, DTYPES, FWD_TOL, GRAD_TOL

ALGORITHMS = tuple(jm.SOFTMAX_ALGORITHMS)

# Odd shapes, softmax over the last axis.


@functools.partial(jax.jit, static_argnames=("axis", "algorithm"))
def softmax_jit(x, axis=-1, algorithm="auto"):
    return jm.softmax(x, axis, algorithm=algorithm)


@functools.partial(jax.jit, static_argnames=("axis", "algorithm"))
def softmax_vjp_jit(x, g, axis=-1, algorithm="auto"):
    y, vjp = jax.vjp(lambda t: jm.softmax(t, axis=axis, algorithm=algorithm), x)
    return y, vjp(g)[0]


def _skip_cpu_duplicate(device, algorithm, size=float("inf")):
    """On the CPU every algorithm name runs the one CPU kernel, so repeating a check under the other
    names only costs time where the input is large (> 2**18 elements) or the check is not about the
    forward kernel (size left out: axes, gradients). Those repeats are skipped; every name still runs
    on the CPU in the smaller forward checks, and on a GPU every check runs for every algorithm."""
    if device.platform == "cpu" and algorithm != "auto" and size > 2**18:
        pytest.skip("on the CPU every algorithm runs the one kernel; this check runs there with 'auto'")


# The seed's one-thread-per-row kernels (v1, v5) add a whole row serially in float32: the recursive
# summation error bound grows like C * 2^-24 (measured on the H200: 4.8e-5 relative at C = 50257), which
# no fixed tolerance covers. They are a teaching ladder, kept as the seed wrote them.
SERIAL_ALGORITHMS = ("thread_per_row", "online_thread_per_row")


def _fwd_tol(dtype, algorithm, c):
    return max(FWD_TOL[dtype], c * 2.0**-24) if algorithm in SERIAL_ALGORITHMS else FWD_TOL[dtype]


def _check_out(out, x, device):
    assert out.shape == x.shape
    assert out.dtype == x.dtype, f"output dtype {out.dtype} != input dtype {x.dtype}"
    assert out.devices() == {device}, f"output on {out.devices()}, expected {device}"


def test_algorithms_tuple():
    assert isinstance(jm.SOFTMAX_ALGORITHMS, tuple)
    # index = the kernels' `algorithm` attribute: 0 the tuned kernel, 1..7 the seed's ladder v1..v7
    assert jm.SOFTMAX_ALGORITHMS == (
        "auto", "thread_per_row", "block_shared", "warp_shuffle", "warp_block", "online_thread_per_row",
        "online_warp", "unrolled",
    )
    assert "auto" in jm.SOFTMAX_ALGORITHMS
    assert all(isinstance(a, str) for a in jm.SOFTMAX_ALGORITHMS)
    assert len(set(jm.SOFTMAX_ALGORITHMS)) == len(jm.SOFTMAX_ALGORITHMS)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
def test_forward(device, rng, shape, dtype, algorithm):
    x = mt.randn(rng, shape, dtype, scale=3.0)
    out = softmax_jit(jax.device_put(x, device), algorithm=algorithm)
    _check_out(out, x, device)
    mt.assert_finite(out)
    mt.assert_close(out, mt.ref_softmax(x), _fwd_tol(dtype, algorithm, shape[-1]), dtype=dtype)
    # probabilities: non-negative, rows sum to ~1
    o = mt.f64(out)
    assert (o >= 0).all()
    np.testing.assert_allclose(o.sum(-1), 1.0, rtol=0, atol=max(1e-4, 2 * _fwd_tol(dtype, algorithm, shape[-1])))


AXIS_CASES = [
    ((9,), 0),
    ((9,), -1),
    ((4097, 2), 0),
    ((5, 33), 0),
    ((5, 33), -2),
    ((3, 5, 33), 0),
    ((3, 5, 33), 1),
    ((3, 5, 33), 2),
    ((3, 5, 33), -2),
    ((3, 5, 33), -3),
    ((2, 3, 4, 31), 0),
    ((2, 3, 4, 31), 1),
    ((2, 3, 4, 31), 2),
    ((2, 3, 4, 31), 3),
    ((2, 3, 4, 31), -3),
    ((2, 3, 4, 31), -4),
]
AXIS_IDS = [f"{'x'.join(map(str, s))}-axis{a}" for s, a in AXIS_CASES]


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("shape,axis", AXIS_CASES, ids=AXIS_IDS)
def test_forward_axis(device, rng, shape, axis, dtype, algorithm):
    _skip_cpu_duplicate(device, algorithm)
    x = mt.randn(rng, shape, dtype, scale=2.5)
    out = softmax_jit(jax.device_put(x, device), axis=axis, algorithm=algorithm)
    _check_out(out, x, device)
    ref = mt.ref_softmax(x, axis)
    # compare with the softmax axis moved last, so that the per-row checks run along it
    mt.assert_close(np.moveaxis(mt.f64(out), axis, -1), np.moveaxis(ref, axis, -1), FWD_TOL[dtype], dtype=dtype)


def test_default_axis_is_last(device, rng):
    x = mt.randn(rng, (3, 4, 5))
    xd = jax.device_put(x, device)
    a = jm.softmax(xd)
    b = jm.softmax(xd, -1)
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    mt.assert_close(a, mt.ref_softmax(x, -1), FWD_TOL[mt.F32], dtype=mt.F32)


# Several axes, as jax.nn.softmax takes them: their entries form one row (the trailing ones are flattened in place,
# others moved last first); None makes all of x one row, () makes each entry its own row.
MULTI_AXIS_CASES = [
    ((3, 5, 33), (1, 2)),
    ((3, 5, 33), (0, 2)),
    ((3, 5, 33), (2, 0)),
    ((2, 3, 4, 31), (0, 1)),
    ((2, 3, 4, 31), (-1, -3)),
    ((2, 3, 4, 31), (0, 2)),
    ((2, 3, 4, 31), (0, 1, 2, 3)),
    ((4097, 2), (0, 1)),
    ((3, 5, 33), None),
    ((7,), None),
    ((3, 5, 33), ()),
    ((3, 5, 33), [1]),
]
MULTI_AXIS_IDS = [f"{'x'.join(map(str, s))}-axis{'all' if a is None else '.'.join(map(str, a)) or 'none'}"
                  for s, a in MULTI_AXIS_CASES]


def _as_rows(a, axis):
    """a with the softmax's axes moved last and flattened: one row per softmax row, for the per-row checks."""
    axes = range(a.ndim) if axis is None else [x % a.ndim for x in axis]
    moved = np.moveaxis(np.asarray(a), list(axes), list(range(-len(axes), 0)))
    return moved.reshape(*moved.shape[: a.ndim - len(axes)], -1)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("shape,axis", MULTI_AXIS_CASES, ids=MULTI_AXIS_IDS)
def test_axes_tuple_and_none(device, rng, shape, axis, dtype):
    x = mt.randn(rng, shape, dtype, scale=2.5)
    x.flat[rng.integers(x.size)] = -np.inf  # a masked entry somewhere (a row of its own when axis is ())
    g = mt.randn(rng, shape, dtype, scale=1.0)
    static = tuple(axis) if isinstance(axis, list) else axis
    out, dx = softmax_vjp_jit(jax.device_put(x, device), jax.device_put(g, device), axis=static)
    _check_out(out, x, device)
    ref = mt.ref_softmax(x, static)
    mt.assert_close(_as_rows(mt.f64(out), static), _as_rows(ref, static), FWD_TOL[dtype], dtype=dtype, what="y")
    if dtype == mt.F32:  # jax.nn.softmax itself, on the same input
        want = mt.f64(jax.nn.softmax(jnp.asarray(x), axis=static))
        mt.assert_close(_as_rows(mt.f64(out), static), _as_rows(want, static), FWD_TOL[dtype], dtype=dtype)
    ref_dx = mt.ref_softmax_vjp(x, g, static)
    mag = mt.ref_softmax_vjp_mag(x, g, static)
    mt.assert_close(_as_rows(mt.f64(dx), static), _as_rows(ref_dx, static), GRAD_TOL[dtype], dtype=dtype, what="dx",
                    mag=_as_rows(mag, static))
    # the list form is the tuple's. Compared as float64, where NaNs compare equal whatever their bits: on the H200
    # the bf16 NaN of a -inf row (axis ()) failed assert_array_equal on the bf16 arrays themselves.
    np.testing.assert_array_equal(mt.f64(jm.softmax(jax.device_put(x, device), axis)), mt.f64(out))


def test_axes_under_vmap_and_where(device, rng):
    """A tuple of axes inside vmap (the mapped axis folds into the kernel's rows) and with a where mask."""
    x = mt.randn(rng, (4, 3, 5, 7), mt.F32, scale=2.0)
    mask = rng.random((3, 5, 7)) < 0.7
    mask[1] = False  # an example whose rows (axes 1, 2 of it) are all left out: zeros
    xd, md = jax.device_put(x, device), jax.device_put(mask, device)
    y = jax.jit(jax.vmap(lambda t: jm.softmax(t, axis=(0, 2), where=md)))(xd)
    xm = np.where(mask, mt.f64(x), -np.inf)
    with np.errstate(invalid="ignore"):
        want = np.where(mask, np.nan_to_num(mt.ref_softmax(xm, (1, 3)), nan=0.0), 0.0)
    assert (mt.f64(y)[:, ~mask] == 0).all()
    mt.assert_close(_as_rows(mt.f64(y), (1, 3)), _as_rows(want, (1, 3)), FWD_TOL[mt.F32], dtype=mt.F32)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("c", [3, 33, 1000, 4097])
def test_masked_neg_inf(device, rng, c, dtype, algorithm):
    """-inf entries give exactly 0 (masking); the other entries match the reference; a fully
    masked row gives NaN in that row only (as jax.nn.softmax does)."""
    n = 6
    x = mt.randn(rng, (n, c), dtype, scale=2.0)
    mask = rng.random((n, c)) < 0.4
    mask[[0, 4, 5], 0] = False  # the randomly masked rows keep a finite entry (c may be small)
    mask[1, :] = True  # fully masked row -> NaN
    mask[2, :] = True
    mask[2, c // 2] = False  # a single unmasked entry -> one-hot
    mask[3, :] = False  # no mask at all
    x[mask] = -np.inf
    out = softmax_jit(jax.device_put(x, device), algorithm=algorithm)
    _check_out(out, x, device)
    o = mt.f64(out)
    ref = mt.ref_softmax(x)
    assert np.isnan(ref[1]).all()
    assert np.isnan(o[1]).all(), f"fully -inf row should be NaN, got {o[1][:8]}"
    keep = np.ones(n, bool)
    keep[1] = False
    assert (o[keep][mask[keep]] == 0).all(), "masked (-inf) entries must give exactly 0"
    assert o[2, c // 2] == 1.0
    mt.assert_close(o[keep], ref[keep], FWD_TOL[dtype], dtype=dtype)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("c", [5, 1000])
def test_nan_row(device, rng, c, dtype, algorithm):
    x = mt.randn(rng, (4, c), dtype)
    x[2, c // 3] = np.nan
    out = mt.f64(softmax_jit(jax.device_put(x, device), algorithm=algorithm))
    assert np.isnan(out[2]).all(), "a NaN input makes its whole row NaN"
    others = [0, 1, 3]
    mt.assert_close(out[others], mt.ref_softmax(x)[others], FWD_TOL[dtype], dtype=dtype)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("c", [31, 1000, 4097])
def test_huge_logits(device, rng, c, dtype, algorithm):
    """Logits of magnitude ~1e4 (nearly one-hot rows): stable, no overflow, matches the reference."""
    x = np.clip(1e4 * rng.standard_normal((5, c)), -6e4, 6e4).astype(np.float32).astype(dtype)
    out = softmax_jit(jax.device_put(x, device), algorithm=algorithm)
    mt.assert_finite(out)
    mt.assert_close(out, mt.ref_softmax(x), FWD_TOL[dtype], dtype=dtype)


def test_cpu_exp_accuracy_f32():
    """Rows (0, a): y = (1, e^a) / (1 + e^a) for a over [-110, 0], where every exp of the kernel lies, against
    float64 within 4 float ulp: the CPU's exps are polynomials (cpp/host_math.h). Results below the smallest
    normal float may be 0: XLA runs CPU kernels with subnormals flushed (its own exp gives 0 there too). (The
    GPU's ex2.approx of a pre-scaled argument is held to FWD_TOL by the other tests.)"""
    a = np.concatenate([np.linspace(-110.0, 0.0, 40001), -np.logspace(-8, 0, 2001), [-0.0, -np.inf]])
    x = np.stack([np.zeros_like(a), a], axis=1).astype(np.float32)
    y = np.asarray(jax.jit(jm.softmax)(jax.device_put(x, jax.devices("cpu")[0])), np.float64)
    e = np.exp(x[:, 1].astype(np.float64))
    ref = np.stack([1.0 / (1.0 + e), e / (1.0 + e)], axis=1)
    tiny = float(np.finfo(np.float32).tiny)
    ulp = np.spacing(ref.astype(np.float32)).astype(np.float64)
    bad = (np.abs(y - ref) > np.where(ref < tiny, tiny, 4 * ulp)).any(axis=1)
    assert not bad.any(), f"a = {x[bad, 1][:5]}: y = {y[bad][:5]}, float64 {ref[bad][:5]}"


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("shift", [1e4, -1e4, 3e4])
@pytest.mark.parametrize("c", [33, 4097])
def test_shift_invariance_f32(device, rng, c, shift, algorithm):
    """softmax(x + shift) == softmax(x): exactly the reference of the (rounded) shifted input, and
    close to softmax(x) up to the rounding of x + shift in float32 (ulp(3e4) ~ 2e-3)."""
    x = mt.randn(rng, (6, c), np.float32, scale=2.0)
    xs = (x + np.float32(shift)).astype(np.float32)
    out_s = softmax_jit(jax.device_put(xs, device), algorithm=algorithm)
    mt.assert_finite(out_s)
    mt.assert_close(out_s, mt.ref_softmax(xs), FWD_TOL[mt.F32], dtype=mt.F32)
    out = softmax_jit(jax.device_put(x, device), algorithm=algorithm)
    assert mt.rel_err(out_s, mt.f64(out)) < 1e-2


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("dtype", DTYPES[1:], ids=DTYPE_IDS[1:])
def test_shift_low_precision(device, rng, dtype, algorithm):
    x = (mt.randn(rng, (4, 257), np.float32) + np.float32(1e4)).astype(dtype)
    out = softmax_jit(jax.device_put(x, device), algorithm=algorithm)
    mt.assert_finite(out)
    mt.assert_close(out, mt.ref_softmax(x), FWD_TOL[dtype], dtype=dtype)


# ----------------------------------------------------------------------------------------------
# backward
# ----------------------------------------------------------------------------------------------

GRAD_CASES = [
    ((4, 1), -1),
    ((5, 3), -1),
    ((7, 31), -1),
    ((3, 33), -1),
    ((1, 1000), -1),
    ((2, 4097), -1),
    ((3, 50257), -1),
    ((17,), 0),
    ((2, 3, 33), -1),
    ((2, 3, 33), 1),
    ((2, 2, 3, 31), 0),
    ((2, 2, 3, 31), -2),
]
GRAD_IDS = [f"{'x'.join(map(str, s))}-axis{a}" for s, a in GRAD_CASES]


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("shape,axis", GRAD_CASES, ids=GRAD_IDS)
def test_grad(device, rng, shape, axis, dtype, algorithm):
    _skip_cpu_duplicate(device, algorithm)
    x = mt.randn(rng, shape, dtype, scale=2.0)
    g = mt.randn(rng, shape, dtype, scale=1.0)
    y, dx = softmax_vjp_jit(jax.device_put(x, device), jax.device_put(g, device), axis=axis, algorithm=algorithm)
    _check_out(y, x, device)
    _check_out(dx, x, device)
    mt.assert_finite(dx, "dx")
    ref = mt.ref_softmax_vjp(x, g, axis)
    mag = mt.ref_softmax_vjp_mag(x, g, axis)
    mt.assert_close(
        np.moveaxis(mt.f64(dx), axis, -1),
        np.moveaxis(ref, axis, -1),
        GRAD_TOL[dtype],
        dtype=dtype,
        what="dx",
        mag=np.moveaxis(mag, axis, -1),
    )


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("shape,axis", [((6, 33), -1), ((3, 4, 5), 1), ((2, 1000), -1)], ids=["6x33", "3x4x5-axis1", "2x1000"])
def test_grad_matches_xla(device, rng, shape, axis, dtype):
    """jax.grad of sum(softmax(x) * w) equals jax.grad of jax.nn.softmax computed in float32 on
    the upcast input (loose tolerance for bf16/f16 inputs)."""
    x = mt.randn(rng, shape, dtype, scale=2.0)
    w = mt.randn(rng, shape, np.float32, scale=1.0)
    xd, wd = jax.device_put(x, device), jax.device_put(w, device)

    @jax.jit
    def ours(x, w):
        return jax.grad(lambda t: jnp.sum(jm.softmax(t, axis).astype(jnp.float32) * w))(x)

    @jax.jit
    def xla(x, w):
        return jax.grad(lambda t: jnp.sum(mt.jnp_softmax(t, axis) * w))(x.astype(jnp.float32))

    got = ours(xd, wd)
    assert got.dtype == x.dtype
    want = xla(xd, wd)
    tol = {mt.F32: 1e-5, mt.BF16: 3e-2, mt.F16: 5e-3}[dtype]
    assert mt.rel_err(got, want) < tol + 2 * mt.rel_err(mt.round_to(want, dtype), want)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_grad_masked(device, rng, dtype, algorithm):
    n, c = 5, 37
    x = mt.randn(rng, (n, c), dtype)
    mask = rng.random((n, c)) < 0.5
    mask[:, 0] = False  # every row keeps at least one finite entry
    x[mask] = -np.inf
    g = mt.randn(rng, (n, c), dtype, scale=1.0)
    _, dx = softmax_vjp_jit(jax.device_put(x, device), jax.device_put(g, device), algorithm=algorithm)
    d = mt.f64(dx)
    mt.assert_finite(d, "dx")
    assert (d[mask] == 0).all(), "the gradient at masked (-inf) entries must be 0"
    mt.assert_close(d, mt.ref_softmax_vjp(x, g), GRAD_TOL[dtype], dtype=dtype, what="dx", mag=mt.ref_softmax_vjp_mag(x, g))


# ----------------------------------------------------------------------------------------------
# where= (jax.nn.softmax's mask): the entries it leaves out take no part and come out 0
# ----------------------------------------------------------------------------------------------


def _ref_where(x, mask, axis=-1):
    """float64 softmax of x over the entries where mask (broadcast to x) is True, 0 elsewhere and in rows with none."""
    mask = np.broadcast_to(np.asarray(mask, bool), x.shape)
    y = mt.ref_softmax(np.where(mask, mt.f64(x), -np.inf), axis)
    return np.where(mask, np.nan_to_num(y, nan=0.0), 0.0)


def _where_case(rng, n, c, dtype, mask_shape):
    """x (NaN and +inf at entries the mask leaves out: they must not reach the rows) and a mask of mask_shape
    whose second row (or column, for a (1, c) mask) keeps nothing."""
    x = mt.randn(rng, (n, c), dtype, scale=3.0)
    mask = rng.random(mask_shape) < 0.6
    mask.flat[0] = True
    if mask_shape[0] > 1:
        mask[1, ...] = False
    full = np.broadcast_to(mask, (n, c))
    out = np.argwhere(~full)
    x[tuple(out[::2].T)] = np.nan
    x[tuple(out[1::2].T)] = np.inf
    return x, mask


@pytest.mark.parametrize("algorithm", ["auto", "online_warp"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("mask_shape", ["full", "row", "column"])
@pytest.mark.parametrize("c", [1, 33, 1000])
def test_where(device, rng, c, mask_shape, dtype, algorithm):
    n = 5
    shape = {"full": (n, c), "row": (1, c), "column": (n, 1)}[mask_shape]
    x, mask = _where_case(rng, n, c, dtype, shape)
    f = jax.jit(lambda t, w: jm.softmax(t, where=w, algorithm=algorithm))
    out = f(jax.device_put(x, device), jax.device_put(mask, device))
    _check_out(out, x, device)
    o = mt.f64(out)
    full = np.broadcast_to(mask, x.shape)
    assert (o[~full] == 0).all(), "entries outside `where` must give exactly 0"
    mt.assert_finite(o, "y")
    mt.assert_close(o, _ref_where(x, mask), FWD_TOL[dtype], dtype=dtype)
    if dtype == mt.F32:  # jax.nn.softmax's own `where`, on the same input
        mt.assert_close(o, mt.f64(jax.nn.softmax(jnp.asarray(x), where=jnp.asarray(mask))), FWD_TOL[dtype], dtype=dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_where_grad_axis_and_vmap(device, rng, dtype):
    """The gradient through `where` (0 outside it and in rows it leaves empty, finite everywhere), along axis 0,
    and under vmap with a mask per example; an integer mask reads as jnp.where's condition (nonzero: kept)."""
    n, c = 6, 37
    x, mask = _where_case(rng, n, c, dtype, (n, c))
    g = mt.randn(rng, (n, c), dtype, scale=1.0)
    xd, md, gd = (jax.device_put(a, device) for a in (x, mask, g))

    def vjp(t, w, ct, axis=-1):
        y, back = jax.vjp(lambda u: jm.softmax(u, axis, w), t)
        return y, back(ct)[0]

    full = np.broadcast_to(mask, x.shape)
    xm = np.where(full, mt.f64(x), -np.inf)
    want = np.where(full, np.nan_to_num(mt.ref_softmax_vjp(xm, g), nan=0.0), 0.0)
    _, dx = jax.jit(vjp)(xd, md, gd)
    d = mt.f64(dx)
    mt.assert_finite(d, "dx")
    assert (d[~full] == 0).all() and (d[1] == 0).all(), "no gradient outside `where` or in a row it leaves empty"
    mag = np.nan_to_num(mt.ref_softmax_vjp_mag(xm, g), nan=0.0)
    mt.assert_close(d, want, GRAD_TOL[dtype], dtype=dtype, what="dx", mag=mag)

    y0, dx0 = jax.jit(functools.partial(vjp, axis=0))(jax.device_put(x.T.copy(), device), md.T, gd.T)
    mt.assert_close(y0, _ref_where(x, mask).T, FWD_TOL[dtype], dtype=dtype, what="y (axis 0)")
    mt.assert_close(dx0, want.T, GRAD_TOL[dtype], dtype=dtype, what="dx (axis 0)", mag=mag.T)

    yv = jax.jit(jax.vmap(lambda t, w: jm.softmax(t, where=w)))(xd[:, None], jax.device_put(mask.astype(np.int32), device)[:, None])
    mt.assert_close(yv[:, 0], _ref_where(x, mask), FWD_TOL[dtype], dtype=dtype, what="y (vmap, int mask)")


# ----------------------------------------------------------------------------------------------
# empty inputs, stale outputs, eager mode
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize(
    "shape,axis", [((0, 8), -1), ((0, 8), 0), ((4, 0), -1), ((4, 0), 0), ((2, 0, 3), 1), ((2, 0, 3), -1), ((0,), 0)]
)
def test_empty(device, shape, axis, dtype):
    x = np.zeros(shape, dtype)
    xd = jax.device_put(x, device)
    y, dx = softmax_vjp_jit(xd, xd, axis=axis)
    assert y.shape == shape and y.dtype == x.dtype
    assert dx.shape == shape and dx.dtype == x.dtype
    out = jm.softmax(xd, axis)
    assert out.shape == shape and out.dtype == x.dtype


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("shape", [(7, 33), (3, 4097)], ids=["7x33", "3x4097"])
def test_stale_and_poisoned_outputs(device, rng, shape, algorithm):
    """Two fresh inputs of one shape through the same compiled function (the second result must
    not hold anything of the first); NaN-poisoned memory freed just before the call must not leak
    into the outputs."""
    for _ in range(2):
        mt.poison(device, shape)
        x = mt.randn(rng, shape, np.float32)
        g = mt.randn(rng, shape, np.float32, scale=1.0)
        y, dx = softmax_vjp_jit(jax.device_put(x, device), jax.device_put(g, device), algorithm=algorithm)
        mt.assert_finite(y, "y")
        mt.assert_finite(dx, "dx")
        mt.assert_close(y, mt.ref_softmax(x), FWD_TOL[mt.F32], dtype=mt.F32, what="y")
        mt.assert_close(dx, mt.ref_softmax_vjp(x, g), GRAD_TOL[mt.F32], dtype=mt.F32, what="dx", mag=mt.ref_softmax_vjp_mag(x, g))


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_eager_matches_jit(device, rng, dtype):
    x = jax.device_put(mt.randn(rng, (5, 77), dtype), device)
    eager = jm.softmax(x)
    jitted = softmax_jit(x)
    assert eager.dtype == x.dtype
    mt.assert_close(eager, mt.f64(jitted), FWD_TOL[dtype], dtype=dtype)


def test_numpy_input(rng):
    x = mt.randn(rng, (3, 10))
    out = jm.softmax(x)
    assert out.dtype == np.float32 and out.shape == (3, 10)
    mt.assert_close(out, mt.ref_softmax(x), FWD_TOL[mt.F32], dtype=mt.F32)


@pytest.mark.skipif(len(ALGORITHMS) < 2, reason="only one softmax algorithm")
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_algorithms_agree(device, rng, dtype):
    x = jax.device_put(mt.randn(rng, (4, 1500), dtype, scale=3.0), device)
    outs = {a: mt.f64(softmax_jit(x, algorithm=a)) for a in ALGORITHMS}
    base = outs["auto"]
    for a, o in outs.items():
        assert mt.rel_err(o, base) < 2 * FWD_TOL[dtype] + 2 * mt.rel_err(mt.round_to(base, dtype), base), a


# ----------------------------------------------------------------------------------------------
# every algorithm (on CUDA: "auto" and the seed's ladder v1..v7) on the edge cases of its geometry
# ----------------------------------------------------------------------------------------------

# C = 1 and 2 (a row shorter than a warp), 31/33 (around a warp), 1000, 4097 (one past 2**12: a last,
# nearly empty stride), 50257 (a vocabulary), 131072 (a long row: many strides of every geometry).
LADDER_COLS = [1, 2, 31, 33, 1000, 4097, 50257, 131072]


def _special_rows(rng, c, dtype):
    """One row per rule of the semantics (as jax.nn.softmax):
    0 plain; 1 about 40% -inf (masking); 2 all -inf (NaN row); 3 one NaN (NaN row); 4 one +inf (NaN
    row); 5 logits of magnitude ~1e4; 6 -inf on the first half (online kernels: running max -inf at the
    start); 7 -inf on the second half; 8 -inf except the last entry (one-hot at C - 1, where v7 clamps);
    9 -inf at columns with c % 32 < 16 (online_warp: half the lanes hold only -inf partials, merged with
    each other and then with finite ones)."""
    x = mt.randn(rng, (10, c), np.float32, scale=3.0)
    x[1, rng.random(c) < 0.4] = -np.inf
    x[1, c // 3] = 0.5
    x[2] = -np.inf
    x[3, c // 2] = np.nan
    x[4, (2 * c) // 3] = np.inf
    x[5] = np.clip(1e4 * rng.standard_normal(c), -6e4, 6e4)
    x[6, : (c + 1) // 2] = -np.inf
    x[7, (c + 1) // 2 :] = -np.inf
    x[8, :-1] = -np.inf
    x[9, np.arange(c) % 32 < 16] = -np.inf
    return x.astype(dtype)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("c", LADDER_COLS)
def test_special_values_every_algorithm(device, rng, c, dtype, algorithm):
    _skip_cpu_duplicate(device, algorithm, 10 * c)
    x = _special_rows(rng, c, dtype)
    out = softmax_jit(jax.device_put(x, device), algorithm=algorithm)
    _check_out(out, x, device)
    o = mt.f64(out)
    ref = mt.ref_softmax(x)
    nan_rows = np.isnan(ref).all(-1)
    assert nan_rows[[2, 3, 4]].all() and not nan_rows[[0, 1, 5, 7, 8]].any()
    assert np.isnan(o[nan_rows]).all(), f"rows {np.nonzero(nan_rows)[0]} must be all NaN"
    fin = ~nan_rows
    assert np.isfinite(o[fin]).all(), f"rows {np.nonzero(fin)[0]} must be finite"
    xf = mt.f64(x)[fin]
    assert (o[fin][xf == -np.inf] == 0).all(), "-inf entries must give exactly 0"
    assert o[8, -1] == 1.0, "a single finite entry gives exactly 1"
    mt.assert_close(o, ref, _fwd_tol(dtype, algorithm, c), dtype=dtype)
    np.testing.assert_allclose(o[fin].sum(-1), 1.0, rtol=0, atol=max(1e-4, 2 * _fwd_tol(dtype, algorithm, c)))


# Many rows: more rows than the ladder kernels' grids have threads, warps or blocks (at most 32 blocks
# per SM), so every geometry's grid-stride loop over rows runs, with special rows far into the tensor.
MANY_ROWS = [(1, 50257), (2**20 + 1, 2), (100003, 33), (9001, 520)]


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("shape", MANY_ROWS, ids=["x".join(map(str, s)) for s in MANY_ROWS])
def test_many_rows_every_algorithm(device, rng, shape, dtype, algorithm):
    n, c = shape
    _skip_cpu_duplicate(device, algorithm, n * c)
    x = mt.randn(rng, shape, np.float32, scale=3.0)
    if n > 1:
        x[n // 2] = -np.inf
        x[n // 3, c // 2] = np.nan
        x[n - 1, ::2] = -np.inf
        x[n - 2, 0] = np.inf
    x = x.astype(dtype)
    out = softmax_jit(jax.device_put(x, device), algorithm=algorithm)
    _check_out(out, x, device)
    mt.assert_close(out, mt.ref_softmax(x), _fwd_tol(dtype, algorithm, c), dtype=dtype)


@pytest.mark.parametrize("index", [-1, len(ALGORITHMS), 2**32 + 1])
def test_kernels_reject_unknown_index(device, index):
    """The handlers themselves (CPU and CUDA) accept indices 0..7 only; jm.softmax never passes others."""
    import importlib

    sm = importlib.import_module("jax_memops.softmax")  # the module (jax_memops.softmax is the function)
    x = jax.device_put(np.ones((2, 8), np.float32), device)
    with pytest.raises(Exception, match="INVALID_ARGUMENT.*algorithm"):
        jax.block_until_ready(jax.jit(sm._softmax_last, static_argnums=1)(x, index))


# ----------------------------------------------------------------------------------------------
# "auto" (cpp/softmax_launch.cuh): every size class and its boundaries, forward and backward
# ----------------------------------------------------------------------------------------------

# A thread holds 16 f32 / 32 bf16-f16 row elements: sub-warp rows (4..32 threads) up to C = 512 / 1024,
# one block per row up to 8192 / 16384 — but the forward gives 16-bit rows of C <= 64, 128 and 256, f32 rows of 32,
# 64, 128 and 256 two packs per thread (v25..v27: 16-bit on 4..16 threads, blocks of 128; f32 on 4..32), other
# 16-bit rows of 129 .. 2048 64 elements per thread (v23: sub-warp rows of 4..32 threads), and (v9) rows of 4097
# (16-bit 2049) .. 32768
# 8 packs per thread, one block of up to 1024 threads; beyond, the forward (v5, sm_90) takes the
# bulk-copy cluster of k CTAs, each holding ceil(C / 4 or 8 / k) 16-byte packs once in shared memory
# (16-bit: copied into registers of 8 or 16 packs per thread up to 16 x 4096 packs, C = 524288), k with
# the most CTAs resident (counted up to 2 per SM), ties to the smallest k that merges by messages (k >= 4)
# (H200: f32 k = 4 at 50257, 8 at 131072; 16-bit k = 4 at 50257 in registers, 4 at 131072: the buffer
# where it plans a smaller cluster than registers), one buffer up to 16 x ~226 KB per row (f32 ~925K, so
# 1000003 is the stream class; 16-bit 1000003: one buffer, past the registers' limit); the forward on other
# GPUs a cluster of CTAs up to 131072 / 262144 (8 CTAs of 512 threads: 65536 / 131072; 16 of 512 before 8 of
# 1024), the stream class beyond; the backward (v38) clusters of 512-thread CTAs holding 4 or 5 packs of y and dy
# per thread up to 163840 / 327680, then of 16 CTAs of 1024 threads up to 327680 / 655360, the stream class
# beyond. Values on both sides of each limit; C
CLASS_COLS = [1, 2, 7, 31, 32, 33, 64, 65, 127, 128, 129, 256, 512, 513, 1000, 1023, 1024, 1025, 2047, 2048, 2049, 4096,
              4097, 8191, 8192, 8193, 12289, 16384, 16385, 32768, 50257, 65536, 65537, 131072, 131073, 262144,
              262147, 327680, 524288, 600001, 1000003]


def _class_rows(c):
    """Enough rows that short rows fill several row groups (256-thread blocks hold up to 64 rows)."""
    return max(12, min(150, 2**16 // c))


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("c", CLASS_COLS)
def test_auto_size_classes_forward(device, rng, c, dtype):
    """Random rows, then the special rows of _special_rows (NaN, +inf, all -inf, masked, one-hot, huge
    logits) as the last rows: the last row group of the grid, often a partial one."""
    n = _class_rows(c)
    x = np.concatenate([mt.randn(rng, (n - 10, c), np.float32, scale=3.0), _special_rows(rng, c, np.float32)])
    x = x.astype(dtype)
    out = softmax_jit(jax.device_put(x, device))
    _check_out(out, x, device)
    o = mt.f64(out)
    ref = mt.ref_softmax(x)
    nan_rows = np.isnan(ref).all(-1)
    assert np.isnan(o[nan_rows]).all(), f"rows {np.nonzero(nan_rows)[0]} must be all NaN"
    fin = ~nan_rows
    assert np.isfinite(o[fin]).all(), f"rows {np.nonzero(fin)[0]} must be finite"
    assert (o[fin][mt.f64(x)[fin] == -np.inf] == 0).all(), "-inf entries must give exactly 0"
    assert o[-2, -1] == 1.0, "a single finite entry gives exactly 1"
    mt.assert_close(o, ref, FWD_TOL[dtype], dtype=dtype)
    np.testing.assert_allclose(o[fin].sum(-1), 1.0, rtol=0, atol=max(1e-4, 2 * _fwd_tol(dtype, "auto", c)))


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("c", CLASS_COLS)
def test_auto_size_classes_backward(device, rng, c, dtype):
    """dx of every size class; some rows masked (-inf: y = 0 there, so dx = 0)."""
    n = _class_rows(c)
    x = mt.randn(rng, (n, c), np.float32, scale=2.0)
    mask = rng.random((n, c)) < 0.3
    mask[:, -1] = False  # every row keeps a finite entry
    mask[: n // 2] = False
    x[mask] = -np.inf
    x = x.astype(dtype)
    g = mt.randn(rng, (n, c), dtype, scale=1.0)
    y, dx = softmax_vjp_jit(jax.device_put(x, device), jax.device_put(g, device))
    _check_out(dx, x, device)
    d = mt.f64(dx)
    mt.assert_finite(d, "dx")
    assert (d[mask] == 0).all(), "the gradient at masked (-inf) entries must be 0"
    mt.assert_close(y, mt.ref_softmax(x), FWD_TOL[dtype], dtype=dtype, what="y")
    mt.assert_close(d, mt.ref_softmax_vjp(x, g), GRAD_TOL[dtype], dtype=dtype, what="dx", mag=mt.ref_softmax_vjp_mag(x, g))


# More rows than the persistent grids have row slots (CTAs x rows per CTA, or clusters), in each class.
AUTO_MANY_ROWS = [(40000, 129), (20000, 1000), (3000, 4097), (2000, 8193), (600, 16385), (300, 50257), (70, 131072),
                  (20, 262147)]


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("shape", AUTO_MANY_ROWS, ids=["x".join(map(str, s)) for s in AUTO_MANY_ROWS])
def test_auto_many_rows(device, rng, shape, dtype):
    if device.platform == "cpu":
        pytest.skip("about the CUDA kernels' row loops; the CPU kernel is covered by the size-class tests")
    n, c = shape
    x = mt.randn(rng, shape, np.float32, scale=3.0)
    x[n // 2] = -np.inf
    x[n // 3, c // 2] = np.nan
    x[n - 1, ::2] = -np.inf
    x = x.astype(dtype)
    g = mt.randn(rng, shape, dtype, scale=1.0)
    y, dx = softmax_vjp_jit(jax.device_put(x, device), jax.device_put(g, device))
    mt.assert_close(y, mt.ref_softmax(x), FWD_TOL[dtype], dtype=dtype, what="y")
    fin = np.ones(n, bool)
    fin[[n // 2, n // 3]] = False  # NaN rows: dx is NaN there too
    d = mt.f64(dx)
    assert np.isnan(d[~fin]).all()
    mt.assert_close(d[fin], mt.ref_softmax_vjp(x[fin], g[fin]), GRAD_TOL[dtype], dtype=dtype, what="dx",
                    mag=mt.ref_softmax_vjp_mag(x[fin], g[fin]))


# The forward's A/B switch (cpp/softmax_fwd.cu): JAX_MEMOPS_SOFTMAX_FWD, read once per process, so each
# version runs in a fresh interpreter; every class of each version against the float64 reference.
# Rows of 12 or more end with _special_rows (NaN, +inf, all -inf, masked halves, huge logits, ...); rows
# of 4 or more have row 3's first half -inf (threads of only -inf in the block rows: their kept exps
# rescale to 0). VERSION_SHAPES: sub-warp rows (33 with 40000 rows: more row groups than resident CTAs;
# 255..257), block rows (1000, 4095, 4097, 8192 with more rows than resident CTAs), and the bulk-copy
# cluster from 8193 (misaligned) to 600001 (v3: two buffers do not fit at f32, the stream class runs).
_VERSION_SCRIPT = r"""
import jax, numpy as np, jax.numpy as jnp, jax_memops as jm, sys
sys.path.insert(0, {tests!r})
import memops_testing as mt
from test_softmax import _special_rows
rng = np.random.default_rng(0)
for dtype in mt.DTYPES:
    for rows, c in {shapes!r}:
        x = mt.randn(rng, (rows, c), np.float32, scale=3.0)
        x[0, ::3] = -np.inf
        if rows >= 3:
            x[1] = -np.inf
            x[2, c // 2] = np.nan
        if rows > 3:
            x[3, : c // 2] = -np.inf
        if rows >= 12:
            x[-10:] = _special_rows(rng, c, np.float32)
        x = x.astype(dtype)
        y = jax.jit(jm.softmax)(jax.device_put(x, jax.devices("gpu")[0]))
        mt.assert_close(y, mt.ref_softmax(x), mt.FWD_TOL[dtype], dtype=dtype, what=f"{{dtype}} {{(rows, c)}}")
print("OK")
"""
VERSION_SHAPES = [(40000, 33), (5000, 255), (5000, 256), (3000, 257), (300, 1000), (600, 4095), (50, 4097),
                  (600, 8192), (20, 8193), (30, 20000), (300, 50257), (40, 131072), (3, 600001)]


def _run_script(script, shapes, **env_vars):
    return mt.run_script(script, env=env_vars, compile_cache=True, shapes=shapes)


def _run_fwd_script(shapes, **env_vars):
    return _run_script(_VERSION_SCRIPT, shapes, **env_vars)


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize("version", ["v2", "v3-prefetch", "v3", "v5", "v5-s1", "v5-reg", "v7-512", "v9", "v9-wide",
                                     "v9-wide-512", "v14", "v20", "v21", "v23", "v24", "v25", "v26", "v27",
                                     "v49"])
def test_gpu_fwd_versions(gpu, version):
    _run_fwd_script(VERSION_SHAPES, JAX_MEMOPS_SOFTMAX_FWD=version)


# v14: 16-bit rows of 32768 < C whose rows in flight (two 512-thread CTAs per SM, or the row count) fit
# a share of L2 take the two-pass kernel with L2 as the row buffer (softmax_fwd_l2.cuh): the default
# share (56%), all of L2 and none (0: v9's kernels). Every dtype against float64, with the special rows;
# the plan log says which rows took it. Where they go is asserted for the H200 (132 SMs, 60 MB of L2: 264
# rows in flight; C = 50257 takes 26 MB, 100000 53 MB, 131072 69 MB; few rows fit at any C).
L2_SHAPES = [(300, 50257), (40, 65536), (3, 40001), (24, 32769), (300, 100000), (300, 131072), (12, 131072)]


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize("share", ["", "100", "0"])
def test_gpu_fwd_l2_rule(gpu, share):
    err = _run_fwd_script(L2_SHAPES, JAX_MEMOPS_SOFTMAX_L2_SHARE=share, JAX_MEMOPS_SOFTMAX_PLAN_LOG="1")
    l2 = re.findall(r"l2 two-pass .* rows=(\d+) cols=(\d+)", err)
    if share == "0":
        assert not l2, err[-2000:]
    elif "H200" in jax.devices("gpu")[0].device_kind:
        want = {("300", "50257"), ("40", "65536"), ("3", "40001"), ("24", "32769"), ("12", "131072")}
        want |= {("300", "100000")} if share == "100" else set()
        assert set(l2) == want, err[-2000:]


# JAX_MEMOPS_GRID (cpp/cuda_common.cuh grid_for) forces one grid on every row kernel: persistent (the
# register classes, forward and backward, launch one CTA per row group by default) or full (both stream
# classes too: 600001 f32 forward, 700001 backward (262147: the stream class before v38); the row groups of 33 and
# 8192 far outnumber the
# resident CTAs). The backward: dx of jm.softmax's VJP against the float64 reference
# over its classes (sub-warp, block, register cluster from 8193, stream), with _special_rows (NaN, +inf
# and all -inf rows give NaN; -inf entries give dx exactly 0).
_BWD_SCRIPT = r"""
import jax, numpy as np, jax_memops as jm, sys
sys.path.insert(0, {tests!r})
import memops_testing as mt
from test_softmax import _special_rows
rng = np.random.default_rng(0)
gpu = jax.devices("gpu")[0]
vjp = jax.jit(lambda x, g: jax.vjp(jm.softmax, x)[1](g)[0])
for dtype in mt.DTYPES:
    for rows, c in {shapes!r}:
        print("case", np.dtype(dtype).name, c, file=sys.stderr, flush=True)
        x = mt.randn(rng, (rows, c), np.float32, scale=3.0)
        x[0, ::3] = -np.inf
        if rows >= 12:
            x[-10:] = _special_rows(rng, c, np.float32)
        x = x.astype(dtype)
        g = mt.randn(rng, (rows, c), dtype, scale=1.0)
        dx = mt.f64(vjp(jax.device_put(x, gpu), jax.device_put(g, gpu)))
        what = f"dx {{dtype}} {{(rows, c)}}"
        ref = mt.ref_softmax_vjp(x, g)
        mt.assert_close(dx, ref, mt.GRAD_TOL[dtype], dtype=dtype, what=what, mag=mt.ref_softmax_vjp_mag(x, g))
        fin = ~np.isnan(ref).all(-1)
        assert (dx[fin][mt.f64(x)[fin] == -np.inf] == 0).all(), what + ": dx at -inf entries must be 0"
print("OK")
"""
BWD_GRID_SHAPES = [(40000, 33), (5000, 255), (3000, 257), (300, 1000), (50, 4097), (600, 8192), (20, 8193),
                   (30, 50257), (12, 262147), (4, 700001)]


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize("grid", ["persistent", "full"])
def test_gpu_grid(gpu, grid):
    _run_fwd_script(VERSION_SHAPES, JAX_MEMOPS_GRID=grid)
    _run_script(_BWD_SCRIPT, BWD_GRID_SHAPES, JAX_MEMOPS_GRID=grid)


# The backward's A/B switch JAX_MEMOPS_SOFTMAX_BWD (cpp/softmax_bwd.cu): v9-1024 takes 1024-thread CTAs in the
# register clusters first (8193: k = 1 of 1024 threads; 50257: 4; 262147: beyond 8 x 1024 x 16, the
# stream), v9 the 8 CTAs of 1024 threads before 16 of 512 (f32 131072; the default: 16 of 512).
@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize("version", ["v9-1024", "v9"])
def test_gpu_bwd_versions(gpu, version):
    _run_script(_BWD_SCRIPT, BWD_GRID_SHAPES + [(40, 131072)], JAX_MEMOPS_SOFTMAX_BWD=version)


# The bulk-copy cluster plans (cpp/softmax_fwd.cu launch_fwd_tma) under their rules ("") and with the cluster
# size forced by JAX_MEMOPS_SOFTMAX_FWD_K, a power of two or not (where the forced k does not fit, the v2
# classes run): many rows per resident cluster (each buffer refilled with mbarrier parities 0, 1, 0, ...), one
# row, misaligned rows (8193, 50257, 131073), the special rows; k = 16 at 8193 (129 packs per CTA for 256
# threads: threads without packs; v7-512's 512-thread CTAs: more than half without); f32 400000 (v3's two
# buffers do not fit at k <= 16; one buffer does). The plan log must show the variant's CTA size and a
# launch at the forced k.
CLUSTER_SHAPES = [(1900, 8193), (3, 16385), (1, 50257), (320, 50257), (470, 32768), (130, 131072), (260, 131073),
               (12, 400000)]


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize("version,k", [("v5", ""), ("v5", "1"), ("v5", "2"), ("v5", "3"), ("v5", "16"),
                                       ("v5-s1", "16"), ("v5-reg", "16"), ("v3", ""), ("v3", "16"), ("v7-512", ""),
                                       ("v7-512", "16")])
def test_gpu_fwd_cluster_plans(gpu, version, k):
    err = _run_fwd_script(CLUSTER_SHAPES, JAX_MEMOPS_SOFTMAX_FWD=version, JAX_MEMOPS_SOFTMAX_FWD_K=k,
                          JAX_MEMOPS_SOFTMAX_PLAN_LOG="1")
    threads = 512 if version == "v7-512" else 256
    assert f"x {threads} threads" in err, f"no bulk-copy launch of {threads}-thread CTAs:\n" + err[-4000:]
    assert not k or f" k={k} " in err, f"no bulk-copy launch at k = {k}:\n" + err[-4000:]


# v50 (the default; cpp/softmax_fwd.cu kTmaAheadPct): once a bulk-copy CTA's share of a row has landed, it prefetches the
# first 75% of its share of its next row into L2 at L2's evict_last priority; v49 the same at the normal priority; v27
# prefetches nothing. CLUSTER_SHAPES (many rows per cluster, one row, misaligned rows, shares cut short at the row's
# end) against float64 under each ("v50" names the default), at the rule's cluster sizes and at k = 1, 3 and 16; the
# plan log must show each launch's prefetch as the version gives (ceil(0.75 chunk) or 0 packs, "(evict_last)" for the
# default alone).
@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize("version,k", [("", ""), ("", "1"), ("", "3"), ("", "16"), ("v50", "16"), ("v49", ""),
                                       ("v49", "1"), ("v49", "16"), ("v27", "")])
def test_gpu_fwd_l2_ahead(gpu, version, k):
    err = _run_fwd_script(CLUSTER_SHAPES, JAX_MEMOPS_SOFTMAX_FWD=version, JAX_MEMOPS_SOFTMAX_FWD_K=k,
                          JAX_MEMOPS_SOFTMAX_PLAN_LOG="1")
    plans = re.findall(r"softmax_fwd plan: .* chunk=(\d+) packs .* ahead=(\d+) packs( \(evict_last\))?", err)
    assert plans, "no bulk-copy launch:\n" + err[-4000:]
    for chunk, ahead, keep in plans:
        want = 0 if version == "v27" else -(-int(chunk) * 75 // 100)
        assert int(ahead) == want, f"{version or 'default'}: chunk {chunk} prefetched {ahead} packs\n" + err[-4000:]
        kept = version in ("", "v50")
        assert bool(keep) == kept, f"{version or 'default'}: evict_last {bool(keep)}\n" + err[-4000:]


# JAX_MEMOPS_SOFTMAX_PUSH (cpp/softmax_launch.cuh push_min_cluster): how the bulk-copy cluster merges each
# row's (max, sum): by st.async messages into every CTA's inbox (mbarrier per row parity; kPush in
# softmax_fwd_tma.cuh) for every k ("1"), by the cluster barrier and DSMEM reads for every k ("0"), or the
# default rule (messages from k = 4: ""). CLUSTER_SHAPES under each variant's rule and at k = 2, 4, 16
# (many rows per cluster: the inbox slots and barrier phases cycle; k = 16: 16 senders per inbox).
@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize("push", ["0", "1", ""])
@pytest.mark.parametrize("version,k", [("v5", ""), ("v5", "2"), ("v5", "16"), ("v5-s1", "4"), ("v5-reg", "16"),
                                       ("v3", "")])
def test_gpu_fwd_push_reduce(gpu, version, k, push):
    err = _run_fwd_script(CLUSTER_SHAPES, JAX_MEMOPS_SOFTMAX_FWD=version, JAX_MEMOPS_SOFTMAX_FWD_K=k,
                          JAX_MEMOPS_SOFTMAX_PUSH=push, JAX_MEMOPS_SOFTMAX_PLAN_LOG="1")
    plans = re.findall(r"softmax_fwd plan: (.*?) x \d+ threads .* k=(\d+) ", err)
    assert plans, "no bulk-copy launch:\n" + err[-4000:]
    for variant, kk in plans:
        want = push == "1" or (push == "" and int(kk) >= 4)
        assert variant.endswith(", messages") == want, f"PUSH={push!r}: k = {kk} ran {variant!r}\n" + err[-4000:]


# The backward's register clusters under JAX_MEMOPS_SOFTMAX_PUSH: each row's sum(dy * y) merged by
# messages (mail_merge, softmax_rows.cuh) for every k ("1"), by the cluster barrier and DSMEM reads for
# every k ("0"), or by the rule (messages from k = 2 since v38, k = 4 before: ""), in the default cluster order and
# v9's.
# Clusters of k = 2 (f32 8193, bf16 32768), 3 (f32 16385), 4, 7 (f32 32768, 50257), 8, 9 (bf16 131073;
# under v9's order 5 of 1024 threads), 16 (f32 131072; under v9's order 8 of 1024); many rows per
# cluster (the inbox slots and barrier phases cycle), the special rows. The plan log must show every
# launch's merge as the variable asks (v38's plans among them: f32 16385 on 2 CTAs of 5 packs).
BWD_CLUSTER_SHAPES = [(20, 8193), (3, 16385), (470, 32768), (1, 50257), (320, 50257), (40, 131072), (60, 131073)]


def _cluster_plans(err, name):
    """(k, threads, merge, cols, clusters) of each register-cluster launch that the plan log (cpp/softmax_launch.cuh
    log_cluster_rows, JAX_MEMOPS_SOFTMAX_PLAN_LOG=1) names `name` ("softmax_bwd", "softmax_bwd v38", ...)."""
    pat = (re.escape(name) + r": register cluster k=(\d+) x (\d+) threads, merge by (\w+), rows=\d+ cols=(\d+) "
           r"clusters=(\d+)")
    return [(int(k), int(t), merge, int(c), int(n)) for k, t, merge, c, n in re.findall(pat, err)]


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize("push", ["0", "1", ""])
@pytest.mark.parametrize("order", ["", "v9"])
def test_gpu_bwd_push_reduce(gpu, order, push):
    err = _run_script(_BWD_SCRIPT, BWD_CLUSTER_SHAPES, JAX_MEMOPS_SOFTMAX_BWD=order, JAX_MEMOPS_SOFTMAX_PUSH=push,
                      JAX_MEMOPS_SOFTMAX_PLAN_LOG="1")
    plans = [(k, merge) for name in ("softmax_bwd", "softmax_bwd v42")
             for k, _, merge, _, _ in _cluster_plans(err, name)]
    assert plans, "no register-cluster launch:\n" + err[-4000:]
    for k, merge in plans:
        want = "messages" if push == "1" or (push == "" and int(k) >= 2) else "barrier"
        assert merge == want, f"PUSH={push!r}: k = {k} merged by {merge}\n" + err[-4000:]
    merges = {"": {"messages"}, "0": {"barrier"}, "1": {"messages"}}[push]
    assert {merge for _, merge in plans} == merges, f"PUSH={push!r}: merges {plans}\n" + err[-4000:]


# v37 (JAX_MEMOPS_SOFTMAX_BWD=v37, cpp/softmax_bwd.cu launch_bwd_v38): a long row whose register cluster of 512-thread
# CTAs takes fewer CTAs at 5 packs of y and dy per thread than at 4 runs that cluster (kBwdWidePacks). BWD_WIDE_SHAPES
# against float64 under it (many rows per cluster, one row, the special rows; misaligned rows), and the plan log
# must show exactly the clusters the rule gives: f32 16385 / 50257 / 131072 / 131073 on k = 2 / 5 / 13 / 13 (131073
# took the stream class before v38: 17 of 512 or 9 of 1024 CTAs), 16-bit 50257 / 131072 / 131073 / 262147 on 3 / 7 /
# 7 / 13 (16-bit 16385, k = 1, and f32 262147, k = 26, keep the default classes), each merged by messages (k >= 2
# since v38; JAX_MEMOPS_SOFTMAX_PUSH unset).
BWD_WIDE_SHAPES = [(3, 16385), (1, 50257), (320, 50257), (40, 131072), (60, 131073), (12, 262147)]
BWD_WIDE_PLANS = {(16385, 2), (50257, 5), (131072, 13), (131073, 13), (50257, 3), (131072, 7), (131073, 7),
                  (262147, 13)}


@pytest.mark.gpu
@pytest.mark.slow
def test_gpu_bwd_wide_clusters(gpu):
    err = _run_script(_BWD_SCRIPT, BWD_WIDE_SHAPES, JAX_MEMOPS_SOFTMAX_BWD="v37", JAX_MEMOPS_SOFTMAX_PLAN_LOG="1")
    plans = _cluster_plans(err, "softmax_bwd v37")
    assert {(c, k) for k, _, _, c, _ in plans} == BWD_WIDE_PLANS, f"plans {plans}\n" + err[-4000:]
    for k, threads, merge, c, _ in plans:
        assert threads == 512 and merge == "messages", (k, threads, merge, c)  # k >= 2 (kPushMinClusterBwd)


# v38 (JAX_MEMOPS_SOFTMAX_BWD=v38, the default before v39; cpp/softmax_bwd.cu launch_bwd_v38): the long rows' register
# clusters of 4 or 5 packs per thread (bwd_v38_choice: 5 where 4 does not fit 16 CTAs, or where 5 leave fewer thread
# slots idle without trading the messages' merge for the barrier's), on 512-thread CTAs, else on 16 of 1024 threads
# (rows that took the stream class before). BWD_V38_SHAPES against float64; the plan log must show exactly the clusters
# the rule gives beyond launch_auto's own: f32 16385 / 50257 / 100000 / 131073 on 2 / 5 / 10 / 13 of 512 threads (5
# packs), 262144 on 16 of 1024 (4 packs), 262147 / 327680 on 13 / 16 of 1024 (5 packs); 16-bit 100000 / 131073 / 262147
# / 327680 on 5 / 7 / 13 / 16 of 512 (5 packs), 50257 on 3 of 512 (5 packs: both merge by messages), 524288 on 16 of
# 1024 (4 packs), every one merged by messages. launch_auto keeps f32 131072 (16 of 512), 16-bit 16385, 131072 and
# 262144; f32 524288 takes the stream class.
BWD_V38_SHAPES = [(3, 16385), (1, 50257), (320, 50257), (2, 100000), (40, 131072), (60, 131073), (4, 262144),
                  (12, 262147), (2, 327680), (3, 524288)]
BWD_V38_PLANS = {(16385, 2, 512), (50257, 5, 512), (100000, 10, 512), (131073, 13, 512), (262144, 16, 1024),
                 (262147, 13, 1024), (327680, 16, 1024), (100000, 5, 512), (131073, 7, 512), (262147, 13, 512),
                 (327680, 16, 512), (50257, 3, 512), (524288, 16, 1024)}


@pytest.mark.gpu
@pytest.mark.slow
def test_gpu_bwd_v38_clusters(gpu):
    err = _run_script(_BWD_SCRIPT, BWD_V38_SHAPES, JAX_MEMOPS_SOFTMAX_BWD="v38", JAX_MEMOPS_SOFTMAX_PLAN_LOG="1")
    plans = _cluster_plans(err, "softmax_bwd v38")
    assert {(c, k, t) for k, t, _, c, _ in plans} == BWD_V38_PLANS, f"plans {plans}\n" + err[-4000:]
    assert {merge for _, _, merge, _, _ in plans} == {"messages"}, plans  # k >= 2 (kPushMinClusterBwd)
    narrow = r"softmax_bwd: register cluster k=16 x 512 threads, merge by messages, rows=\d+ cols=131072"
    assert re.search(narrow, err), err[-4000:]  # f32 131072: launch_auto's cluster


# v39 (JAX_MEMOPS_SOFTMAX_BWD=v39, the default before v42; cpp/softmax_bwd.cu bwd_y_held): where v38's clusters of 512
# threads do not fit, clusters that hold 8 packs of y per thread and read dy twice (softmax_bwd_rows_kernel's kHoldDy =
# false) on 512 threads, then v38's of 1024, then the y-held ones on 1024 threads. BWD_V39_SHAPES against float64, and
# exactly these y-held plans: f32 196608 / 262144 on 12 / 16 of 512 threads, 524288 on 16 of 1024; 16-bit 524288 on 16
# of 512, 1000003 on 16 of 1024 (misaligned); more rows than resident clusters at 196608 and 524288 (the inboxes cycle).
# v38's plans in between: f32 327680 16 of 1024 (5 packs), 16-bit 327680 16 of 512 (5 packs), 600001 15 of 1024 (5
# packs); f32 600001 and 1000003 take the stream class.
BWD_V39_SHAPES = [(40, 196608), (12, 262144), (2, 327680), (20, 524288), (3, 600001), (1, 1000003)]
BWD_V39_Y_HELD = {(196608, 12, 512), (262144, 16, 512), (524288, 16, 1024), (524288, 16, 512), (1000003, 16, 1024)}
BWD_V39_V38 = {(327680, 16, 1024), (327680, 16, 512), (600001, 15, 1024)}


@pytest.mark.gpu
@pytest.mark.slow
def test_gpu_bwd_v39_y_held(gpu):
    err = _run_script(_BWD_SCRIPT, BWD_V39_SHAPES, JAX_MEMOPS_SOFTMAX_BWD="v39", JAX_MEMOPS_SOFTMAX_PLAN_LOG="1")
    held, v38 = ({(c, k, t) for k, t, merge, c, _ in _cluster_plans(err, name) if merge == "messages"}
                 for name in ("softmax_bwd v39 y-held", "softmax_bwd v39"))
    assert held == BWD_V39_Y_HELD and v38 == BWD_V39_V38, f"y-held {held}, v38's {v38}\n" + err[-4000:]


# v41 (JAX_MEMOPS_SOFTMAX_BWD=v41, an A/B option; cpp/softmax_bwd.cu bwd_v41_choice): v39, but where CTAs of another
# multiple of 32 threads (128..512) keep at least 4% more rows in flight (resident clusters) than v38's clusters of
# 512 threads, those. BWD_V41_SHAPES against float64 (one row, many rows: the inboxes cycle; misaligned rows; the
# special rows). Every v41 launch merges by messages over k >= 2 CTAs of a multiple of 32 threads in [128, 512]; at
# C = 50257 a launch on CTAs of other than 512 threads appears (the 16-bit rows: a model of the H200 gives 5 CTAs of
# 256 threads, 102 resident clusters against v38's 88), with at least 4% more resident clusters than v38's 16-bit plan
# (3 of 512 threads, logged by the same shapes under JAX_MEMOPS_SOFTMAX_BWD=v38).
BWD_V41_SHAPES = [(20, 8193), (3, 16385), (470, 32768), (1, 50257), (320, 50257), (6, 65536), (40, 131072),
                  (4, 150001)]


def _bwd_plan_logs(*versions):
    """{version: stderr} of _BWD_SCRIPT over BWD_V41_SHAPES with the plan log, one fresh process per
    JAX_MEMOPS_SOFTMAX_BWD value ("" the default)."""
    return {v: _run_script(_BWD_SCRIPT, BWD_V41_SHAPES, JAX_MEMOPS_SOFTMAX_BWD=v, JAX_MEMOPS_SOFTMAX_PLAN_LOG="1")
            for v in versions}


@pytest.mark.gpu
@pytest.mark.slow
def test_gpu_bwd_v41_odd_ctas(gpu):
    logs = _bwd_plan_logs("v38", "v41")
    v41 = _cluster_plans(logs["v41"], "softmax_bwd v41")
    assert v41, "no v41 launch:\n" + logs["v41"][-4000:]
    for k, t, merge, c, n in v41:
        assert k >= 2 and t % 32 == 0 and 128 <= t <= 512 and merge == "messages", (k, t, merge, c, n)
    v38 = _cluster_plans(logs["v38"], "softmax_bwd v38")
    base = [n for k, t, _, c, n in v38 if (k, t, c) == (3, 512, 50257)]
    odd = [n for k, t, _, c, n in v41 if c == 50257 and t != 512]
    assert base and odd and max(odd) >= 1.04 * base[0], f"v38 {v38}, v41 {v41}"


def _plans_by_case(err, name):
    """{(dtype, cols): [(k, threads, merge, clusters), ...]} of the launches the plan log names `name`, each under
    the case _BWD_SCRIPT announced last (a plan logged once for consecutive cases of one shape counts for the first)."""
    out, case = {}, None
    for line in err.splitlines():
        if m := re.match(r"case (\w+) (\d+)$", line):
            case = (m[1], int(m[2]))
        elif case:
            for k, t, merge, c, n in _cluster_plans(line, name):
                assert c == case[1], (line, case)
                out.setdefault(case, []).append((k, t, merge, n))
    return out


# v42, the default (cpp/softmax_bwd.cu bwd_v41_choice's keep_ctas): v41, but only where the odd CTAs' clusters keep at least
# as many CTAs resident (clusters x k) as v38's 512-thread plan. Each v42 launch of BWD_V41_SHAPES (against float64)
# must merge by messages on k >= 2 CTAs; each other than v38's own plan on a multiple of 32 threads in [128, 480], with
# >= 1.04x the resident clusters and >= 1x the resident CTAs of v38's plan for the same dtype and width (the same shapes
# under JAX_MEMOPS_SOFTMAX_BWD=v38); at 16-bit 50257 a launch on other than 512 threads appears; at f32 65536 and 16-bit
# 131072, where v41's 7 x 480 threads lost 4% (RESULTS.md "v41"), none does.
@pytest.mark.gpu
@pytest.mark.slow
def test_gpu_bwd_v42_keeps_ctas(gpu):
    logs = _bwd_plan_logs("v38", "")
    v42 = _plans_by_case(logs[""], "softmax_bwd v42")
    v38 = _plans_by_case(logs["v38"], "softmax_bwd v38")
    auto = _plans_by_case(logs["v38"], "softmax_bwd")  # v38's plans that launch_auto runs (512 threads, 4 packs)
    assert v42, "no v42 launch:\n" + logs[""][-4000:]
    for case, plans in v42.items():
        base = v38.get(case, []) + auto.get(case, [])
        assert len(base) == 1 and base[0][1] == 512, (case, base)
        k0, _, _, n0 = base[0]
        for k, t, merge, n in plans:
            assert merge == "messages" and k >= 2, (case, k, t, merge, n)
            if (k, t, n) != (k0, 512, n0):  # v38's plan kept (named v42), else a cluster of other CTAs
                assert t % 32 == 0 and 128 <= t < 512, (case, k, t, n)
                assert n >= 1.04 * n0 and n * k >= n0 * k0, (case, (k, t, n), base)
    assert any(t != 512 for d, c in v42 if c == 50257 and d != "float32" for _, t, _, _ in v42[d, c]), v42
    assert not {("float32", 65536), ("bfloat16", 131072), ("float16", 131072)} & set(v42), v42


# The bulk-copy planner's ties (cpp/softmax_fwd.cu tie_to_messages): by default the smallest k that merges by
# messages (k >= 4) wins a tie in score over a smaller k, so at C = 50257 every dtype's plan is k = 4 by
# messages; JAX_MEMOPS_SOFTMAX_TIE=small restores the smallest k (f32 k = 2, 16-bit k = 1, by the barrier).
# CLUSTER_SHAPES correct against float64 under both. Under v9's rule (16-bit rows of 50257 take v14's
# two-pass kernel by default).
@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize("tie", ["", "small"])
def test_gpu_fwd_tie_rule(gpu, tie):
    err = _run_fwd_script(CLUSTER_SHAPES, JAX_MEMOPS_SOFTMAX_FWD="v9", JAX_MEMOPS_SOFTMAX_TIE=tie,
                          JAX_MEMOPS_SOFTMAX_PLAN_LOG="1")
    plans = re.findall(r"softmax_fwd plan: (.*?) x \d+ threads rows=\d+ cols=(\d+) k=(\d+) ", err)
    at = [(variant, int(k)) for variant, cols, k in plans if cols == "50257"]
    assert at, "no bulk-copy launch at C = 50257:\n" + err[-4000:]
    if tie == "small":
        assert all(k < 4 and not variant.endswith(", messages") for variant, k in at), at
    else:
        assert all(k == 4 and variant.endswith(", messages") for variant, k in at), at
