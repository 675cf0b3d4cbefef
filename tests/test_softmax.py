"""jm.softmax: forward and backward against the float64 NumPy reference, on every device, dtype,
algorithm, axis and odd shape; masking (-inf), NaN rows, huge logits, empty inputs, stale outputs; "auto"'s size
classes and their boundaries. The CUDA kernels' A/B switches: test_softmax_switches.py."""

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
    mt.assert_close(mt.as_rows(mt.f64(out), static), mt.as_rows(ref, static), FWD_TOL[dtype], dtype=dtype, what="y")
    if dtype == mt.F32:  # jax.nn.softmax itself, on the same input
        want = mt.f64(jax.nn.softmax(jnp.asarray(x), axis=static))
        mt.assert_close(mt.as_rows(mt.f64(out), static), mt.as_rows(want, static), FWD_TOL[dtype], dtype=dtype)
    ref_dx = mt.ref_softmax_vjp(x, g, static)
    mag = mt.ref_softmax_vjp_mag(x, g, static)
    mt.assert_close(mt.as_rows(mt.f64(dx), static), mt.as_rows(ref_dx, static), GRAD_TOL[dtype], dtype=dtype, what="dx",
                    mag=mt.as_rows(mag, static))
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
    mt.assert_close(mt.as_rows(mt.f64(y), (1, 3)), mt.as_rows(want, (1, 3)), FWD_TOL[mt.F32], dtype=mt.F32)


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


# Rows longer than 2^16: on the CPU each by its column tiles, each tile's max and sum merged into the row's
# (cpp/softmax_cpu.cc); rows of 2^17 or more, fewer than the pool's threads, with the tiles shared by the pool. Row 1
# of (3, 70001) holds a first tile of -inf only, row 2 a NaN in its last tile; (1, 200003) at logits of ~1e4 (f32).
FEW_LONG_ROWS = [(1, 200003), (2, 140001), (3, 70001), (100003,)]


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("shape", FEW_LONG_ROWS, ids=["x".join(map(str, s)) for s in FEW_LONG_ROWS])
def test_few_long_rows(device, rng, shape, dtype):
    x = mt.randn(rng, shape, dtype, scale=2.0)
    g = mt.randn(rng, shape, dtype, scale=1.0)
    if shape == (3, 70001):
        x[1, :40000] = -np.inf
        x[2, 60000] = np.nan
    if shape == (1, 200003) and dtype == mt.F32:
        x = np.clip(1e4 * rng.standard_normal(shape), -6e4, 6e4).astype(np.float32)
    y, dx = softmax_vjp_jit(jax.device_put(x, device), jax.device_put(g, device))
    _check_out(y, x, device)
    _check_out(dx, x, device)
    finite = ~np.isnan(x).any(axis=-1)  # the NaN row: NaN throughout, forward and backward
    assert np.isnan(mt.f64(y)[~finite]).all() and np.isnan(mt.f64(dx)[~finite]).all()
    yo, dxo = mt.f64(y)[finite], mt.f64(dx)[finite]
    assert (yo[np.isneginf(x[finite])] == 0).all(), "masked (-inf) entries must give exactly 0"
    mt.assert_close(yo, mt.ref_softmax(x)[finite], FWD_TOL[dtype], dtype=dtype, what="y")
    mt.assert_close(dxo, mt.ref_softmax_vjp(x, g)[finite], GRAD_TOL[dtype], dtype=dtype, what="dx",
                    mag=mt.ref_softmax_vjp_mag(x, g)[finite])


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


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("c", LADDER_COLS)
def test_special_values_every_algorithm(device, rng, c, dtype, algorithm):
    _skip_cpu_duplicate(device, algorithm, 10 * c)
    x = mt.special_rows(rng, c, dtype)
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
    """Random rows, then the special rows of mt.special_rows (NaN, +inf, all -inf, masked, one-hot, huge
    logits) as the last rows: the last row group of the grid, often a partial one."""
    n = _class_rows(c)
    x = np.concatenate([mt.randn(rng, (n - 10, c), np.float32, scale=3.0), mt.special_rows(rng, c, np.float32)])
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
