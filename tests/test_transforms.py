"""JAX transformations of the jax_memops ops: jit vs eager, vmap (batched x, batched params, in_axes
other than 0, nested), vmap of grad (per-example parameter gradients), lax.scan (forward and
grad), jax.checkpoint under grad, value_and_grad, and second-order AD (grad of grad, hessian)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_memops as jm
import memops_testing as mt
from memops_testing import DTYPE_IDS, DTYPES, FWD_TOL, GRAD_TOL


def _stack_loop(fn, args, in_axes, out_axis=0):
    """Reference for vmap: call the unbatched op on each example and stack."""
    sizes = {np.shape(a)[ax] for a, ax in zip(args, in_axes) if ax is not None}
    assert len(sizes) == 1
    (b,) = sizes
    outs = []
    for i in range(b):
        ex = [a if ax is None else np.take(a, i, axis=ax) for a, ax in zip(args, in_axes)]
        outs.append(mt.f64(fn(*ex)))
    return np.stack(outs, axis=out_axis)


def _put_all(device, *arrays):
    return [None if a is None else jax.device_put(a, device) for a in arrays]


# ----------------------------------------------------------------------------------------------
# vmap: softmax
# ----------------------------------------------------------------------------------------------

SOFTMAX_VMAP = [
    # (x shape, in_axes, axis inside the example)
    ((3, 4, 33), 0, -1),
    ((4, 3, 33), 1, -1),
    ((4, 33, 3), 2, -1),
    ((4, 33, 3), -1, 0),
    ((3, 4, 33), 0, 0),
    ((5, 2, 3, 17), 1, 1),
]


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("shape,in_axis,axis", SOFTMAX_VMAP, ids=[f"{s}-in{i}-ax{a}" for s, i, a in SOFTMAX_VMAP])
def test_vmap_softmax(device, rng, shape, in_axis, axis, dtype):
    x = mt.randn(rng, shape, dtype, scale=2.5)
    out = jax.jit(jax.vmap(lambda t: jm.softmax(t, axis), in_axes=in_axis))(jax.device_put(x, device))
    want = _stack_loop(lambda t: mt.ref_softmax(t, axis), [x], [in_axis])
    assert out.shape == want.shape and out.dtype == x.dtype
    loop = _stack_loop(lambda t: jm.softmax(jax.device_put(t, device), axis), [x], [in_axis])
    ax = axis % (len(shape) - 1) + 1  # the softmax axis in the stacked output
    mt.assert_close(np.moveaxis(mt.f64(out), ax, -1), np.moveaxis(want, ax, -1), FWD_TOL[dtype], dtype=dtype)
    mt.assert_close(np.moveaxis(mt.f64(out), ax, -1), np.moveaxis(loop, ax, -1), FWD_TOL[dtype], dtype=dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_vmap_grad_softmax(device, rng, dtype):
    x = mt.randn(rng, (4, 3, 29), dtype, scale=2.0)
    w = mt.randn(rng, (4, 3, 29), np.float32, scale=1.0)

    def loss(t, w_):
        return jnp.sum(jm.softmax(t).astype(jnp.float32) * w_)

    got = jax.jit(jax.vmap(jax.grad(loss)))(*_put_all(device, x, w))
    wq = mt.round_to(w, dtype)  # the cotangent reaches the kernel in x's dtype
    want = np.stack([mt.ref_softmax_vjp(x[i], wq[i]) for i in range(4)])
    mag = np.stack([mt.ref_softmax_vjp_mag(x[i], wq[i]) for i in range(4)])
    mt.assert_close(got, want, GRAD_TOL[dtype], dtype=dtype, mag=mag)


def test_nested_vmap_softmax(device, rng):
    x = mt.randn(rng, (2, 3, 4, 21))
    f = jax.jit(jax.vmap(jax.vmap(lambda t: jm.softmax(t, 0), in_axes=1), in_axes=0))
    out = f(jax.device_put(x, device))
    # vmap over axis 0 then over axis 1 of the remainder -> (2, 4, 3, 21), softmax over the 3-axis
    want = np.moveaxis(mt.ref_softmax(x, 1), 1, 2)
    assert out.shape == want.shape
    mt.assert_close(np.moveaxis(mt.f64(out), 2, -1), np.moveaxis(want, 2, -1), FWD_TOL[mt.F32], dtype=mt.F32)


# ----------------------------------------------------------------------------------------------
# vmap: norms and gelu
# ----------------------------------------------------------------------------------------------

B, N, C = 4, 5, 37

NORM_VMAP = [
    # name, x shape, x axis, scale shape, scale axis, bias shape, bias axis
    ("all-batched", (B, N, C), 0, (B, C), 0, (B, C), 0),
    ("x-batched", (B, N, C), 0, (C,), None, (C,), None),
    ("x-batched-scale-batched", (B, N, C), 0, (B, C), 0, (C,), None),
    ("x-axis1", (N, B, C), 1, (C,), None, (C,), None),
    ("x-axis1-params-axis1", (N, B, C), 1, (C, B), 1, (C, B), 1),
    ("x-last-axis", (N, C, B), 2, (C,), None, (C,), None),
    ("x-last-axis-params-batched", (N, C, B), -1, (B, C), 0, (C, B), -1),
    ("x-unbatched-params-batched", (N, C), None, (B, C), 0, (B, C), 0),
    ("x-3d-batched", (B, 2, 3, C), 0, (B, C), 0, (B, C), 0),
]
NORM_IDS = [c[0] for c in NORM_VMAP]


def _vmap_inputs(rng, case, dtype):
    _, xs, xa, ss, sa, bs, ba = case
    x = mt.randn(rng, xs, dtype, scale=2.0, loc=0.3)
    s = mt.randn(rng, ss, np.float32, scale=0.5, loc=1.0)
    b = mt.randn(rng, bs, np.float32, scale=1.0)
    return x, s, b, (xa, sa, ba)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("case", NORM_VMAP, ids=NORM_IDS)
def test_vmap_layer_norm(device, rng, case, dtype):
    x, s, b, axes = _vmap_inputs(rng, case, dtype)
    out = jax.jit(jax.vmap(lambda *a: jm.layer_norm(*a, epsilon=1e-4), in_axes=axes))(*_put_all(device, x, s, b))
    assert out.dtype == x.dtype
    want = _stack_loop(lambda *a: mt.ref_layer_norm(*a, eps=1e-4), [x, s, b], axes)
    loop = _stack_loop(lambda *a: jm.layer_norm(*_put_all(device, *a), epsilon=1e-4), [x, s, b], axes)
    mt.assert_close(out, want, FWD_TOL[dtype], dtype=dtype)
    mt.assert_close(out, loop, FWD_TOL[dtype], dtype=dtype, what="vmap vs loop")


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("case", NORM_VMAP, ids=NORM_IDS)
def test_vmap_rms_norm(device, rng, case, dtype):
    x, s, _, axes = _vmap_inputs(rng, case, dtype)
    axes = axes[:2]
    out = jax.jit(jax.vmap(lambda *a: jm.rms_norm(*a, epsilon=1e-4), in_axes=axes))(*_put_all(device, x, s))
    assert out.dtype == x.dtype
    want = _stack_loop(lambda *a: mt.ref_rms_norm(*a, eps=1e-4), [x, s], axes)
    loop = _stack_loop(lambda *a: jm.rms_norm(*_put_all(device, *a), epsilon=1e-4), [x, s], axes)
    mt.assert_close(out, want, FWD_TOL[dtype], dtype=dtype)
    mt.assert_close(out, loop, FWD_TOL[dtype], dtype=dtype, what="vmap vs loop")


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("case", NORM_VMAP, ids=NORM_IDS)
def test_vmap_gelu(device, rng, case, dtype):
    x, s, b, axes = _vmap_inputs(rng, case, dtype)
    out = jax.jit(jax.vmap(jm.scale_bias_gelu, in_axes=axes))(*_put_all(device, x, s, b))
    assert out.dtype == x.dtype
    want = _stack_loop(mt.ref_scale_bias_gelu, [x, s, b], axes)
    mag = _stack_loop(mt.ref_scale_bias_gelu_mag, [x, s, b], axes)
    mt.assert_close(out, want, FWD_TOL[dtype], dtype=dtype, mag=mag)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_vmap_gelu_number_params(device, rng, dtype):
    x = mt.randn(rng, (B, N, C), dtype)
    b = mt.randn(rng, (B, C), np.float32)
    out = jax.jit(jax.vmap(lambda t: jm.scale_bias_gelu(t, 1.3, -0.2)))(jax.device_put(x, device))
    mt.assert_close(out, mt.ref_scale_bias_gelu(x, 1.3, -0.2), FWD_TOL[dtype], dtype=dtype, mag=mt.ref_scale_bias_gelu_mag(x, 1.3, -0.2))
    out = jax.jit(jax.vmap(lambda t, b_: jm.scale_bias_gelu(t, 0.7, b_)))(*_put_all(device, x, b))
    want = np.stack([mt.ref_scale_bias_gelu(x[i], 0.7, b[i]) for i in range(B)])
    mag = np.stack([mt.ref_scale_bias_gelu_mag(x[i], 0.7, b[i]) for i in range(B)])
    mt.assert_close(out, want, FWD_TOL[dtype], dtype=dtype, mag=mag)


def test_nested_vmap_layer_norm(device, rng):
    """vmap over two batch dims, params batched at both levels."""
    x = mt.randn(rng, (2, 3, 4, 19))
    s = mt.randn(rng, (2, 3, 19), loc=1.0, scale=0.5)
    b = mt.randn(rng, (2, 3, 19))
    f = jax.jit(jax.vmap(jax.vmap(jm.layer_norm)))
    out = f(*_put_all(device, x, s, b))
    want = np.stack([np.stack([mt.ref_layer_norm(x[i, j], s[i, j], b[i, j]) for j in range(3)]) for i in range(2)])
    mt.assert_close(out, want, FWD_TOL[mt.F32], dtype=mt.F32)
    # inner level batches only x
    f2 = jax.jit(jax.vmap(jax.vmap(jm.layer_norm, in_axes=(0, None, None)), in_axes=(0, 0, 0)))
    out2 = f2(x, s[:, 0], b[:, 0])
    want2 = np.stack([mt.ref_layer_norm(x[i], s[i, 0], b[i, 0]) for i in range(2)])
    mt.assert_close(out2, want2, FWD_TOL[mt.F32], dtype=mt.F32)


# ----------------------------------------------------------------------------------------------
# vmap of grad: per-example parameter gradients
# ----------------------------------------------------------------------------------------------

GRAD_VMAP = [
    ("all-batched", (0, 0, 0, 0)),
    ("shared-params", (0, None, None, 0)),
    ("shared-scale", (0, None, 0, 0)),
    ("shared-w", (0, 0, 0, None)),
]


def _grad_vmap_inputs(rng, axes, dtype):
    x = mt.randn(rng, (B, N, C), dtype, scale=2.0, loc=0.2)
    s = mt.randn(rng, (B, C) if axes[1] == 0 else (C,), np.float32, loc=1.0, scale=0.5)
    b = mt.randn(rng, (B, C) if axes[2] == 0 else (C,), np.float32)
    w = mt.randn(rng, (B, N, C) if axes[3] == 0 else (N, C), np.float32)
    return x, s, b, w


def _ex(a, ax, i):
    return a if ax is None else a[i]


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("name,axes", GRAD_VMAP, ids=[g[0] for g in GRAD_VMAP])
def test_vmap_grad_layer_norm(device, rng, name, axes, dtype):
    x, s, b, w = _grad_vmap_inputs(rng, axes, dtype)

    def loss(x_, s_, b_, w_):
        return jnp.sum(jm.layer_norm(x_, s_, b_).astype(jnp.float32) * w_)

    dx, ds, db = jax.jit(jax.vmap(jax.grad(loss, argnums=(0, 1, 2)), in_axes=axes))(*_put_all(device, x, s, b, w))
    assert ds.shape == (B, C) and db.shape == (B, C) and dx.shape == x.shape
    wq = mt.round_to(w, dtype)
    refs = [mt.ref_layer_norm_vjp(x[i], _ex(s, axes[1], i), _ex(b, axes[2], i), 1e-5, _ex(wq, axes[3], i)) for i in range(B)]
    mags = np.stack([mt.ref_layer_norm_vjp_mag(x[i], _ex(s, axes[1], i), 1e-5, _ex(wq, axes[3], i)) for i in range(B)])
    mt.assert_close(dx, np.stack([r[0] for r in refs]), GRAD_TOL[dtype], dtype=dtype, what="dx", mag=mags)
    mt.assert_close(ds, np.stack([r[1] for r in refs]), GRAD_TOL[dtype], dtype=mt.F32, what="per-example dscale")
    mt.assert_close(db, np.stack([r[2] for r in refs]), GRAD_TOL[dtype], dtype=mt.F32, what="per-example dbias")
    # and the same as a loop of the unbatched grad
    g1 = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))
    loop = [g1(*_put_all(device, x[i], _ex(s, axes[1], i), _ex(b, axes[2], i), _ex(w, axes[3], i))) for i in range(B)]
    mt.assert_close(ds, np.stack([mt.f64(t[1]) for t in loop]), GRAD_TOL[dtype], what="vmap vs loop dscale")


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("name,axes", GRAD_VMAP, ids=[g[0] for g in GRAD_VMAP])
def test_vmap_grad_rms_norm(device, rng, name, axes, dtype):
    x, s, _, w = _grad_vmap_inputs(rng, axes, dtype)
    axes = (axes[0], axes[1], axes[3])

    def loss(x_, s_, w_):
        return jnp.sum(jm.rms_norm(x_, s_).astype(jnp.float32) * w_)

    dx, ds = jax.jit(jax.vmap(jax.grad(loss, argnums=(0, 1)), in_axes=axes))(*_put_all(device, x, s, w))
    assert ds.shape == (B, C) and dx.shape == x.shape
    wq = mt.round_to(w, dtype)
    refs = [mt.ref_rms_norm_vjp(x[i], _ex(s, axes[1], i), 1e-6, _ex(wq, axes[2], i)) for i in range(B)]
    mags = np.stack([mt.ref_rms_norm_vjp_mag(x[i], _ex(s, axes[1], i), 1e-6, _ex(wq, axes[2], i)) for i in range(B)])
    mt.assert_close(dx, np.stack([r[0] for r in refs]), GRAD_TOL[dtype], dtype=dtype, what="dx", mag=mags)
    mt.assert_close(ds, np.stack([r[1] for r in refs]), GRAD_TOL[dtype], dtype=mt.F32, what="per-example dscale")


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("name,axes", GRAD_VMAP, ids=[g[0] for g in GRAD_VMAP])
def test_vmap_grad_gelu(device, rng, name, axes, dtype):
    x, s, b, w = _grad_vmap_inputs(rng, axes, dtype)

    def loss(x_, s_, b_, w_):
        return jnp.sum(jm.scale_bias_gelu(x_, s_, b_).astype(jnp.float32) * w_)

    dx, ds, db = jax.jit(jax.vmap(jax.grad(loss, argnums=(0, 1, 2)), in_axes=axes))(*_put_all(device, x, s, b, w))
    assert ds.shape == (B, C) and db.shape == (B, C)
    wq = mt.round_to(w, dtype)
    refs = [mt.ref_scale_bias_gelu_vjp(x[i], _ex(s, axes[1], i), _ex(b, axes[2], i), _ex(wq, axes[3], i)) for i in range(B)]
    mags = np.stack(
        [mt.ref_scale_bias_gelu_vjp_mag(x[i], _ex(s, axes[1], i), _ex(b, axes[2], i), _ex(wq, axes[3], i)) for i in range(B)]
    )
    mt.assert_close(dx, np.stack([r[0] for r in refs]), GRAD_TOL[dtype], dtype=dtype, what="dx", mag=mags)
    mt.assert_close(ds, np.stack([r[1] for r in refs]), GRAD_TOL[dtype], dtype=mt.F32, what="per-example dscale")
    mt.assert_close(db, np.stack([r[2] for r in refs]), GRAD_TOL[dtype], dtype=mt.F32, what="per-example dbias")


# Per-example parameter gradients of shapes that the CPU handlers split into many pieces of work (rows for dx,
# columns for the parameter sums, cpu_common.h parallel_for): (3, 700, 96) many row pieces, (3, 24, 3000) many
# column pieces; checked against float64 and for bitwise repeatability (the split never depends on the threads).
MANY_PIECES = [(3, 700, 96), (3, 24, 3000)]


@pytest.mark.parametrize("op", ["layer_norm", "rms_norm", "gelu"])
@pytest.mark.parametrize("bnc", MANY_PIECES, ids=[f"{b}x{n}x{c}" for b, n, c in MANY_PIECES])
def test_vmap_grad_many_pieces(device, rng, op, bnc):
    if device.platform != "cpu":
        pytest.skip("the CPU handlers' split (the GPU kernels' partials: test_gpu.py test_backward_partials*)")
    b_, n, c = bnc
    x = mt.randn(rng, (b_, n, c), np.float32, scale=2.0, loc=0.2)
    s = mt.randn(rng, (b_, c), np.float32, loc=1.0, scale=0.5)
    b = mt.randn(rng, (b_, c), np.float32)
    w = mt.randn(rng, (b_, n, c), np.float32)
    fn = {"layer_norm": lambda x_, s_, b_: jm.layer_norm(x_, s_, b_),
          "rms_norm": lambda x_, s_, b_: jm.rms_norm(x_, s_) + 0 * b_,
          "gelu": lambda x_, s_, b_: jm.scale_bias_gelu(x_, s_, b_)}[op]
    ref = {"layer_norm": lambda i: mt.ref_layer_norm_vjp(x[i], s[i], b[i], 1e-5, w[i]),
           "rms_norm": lambda i: mt.ref_rms_norm_vjp(x[i], s[i], 1e-6, w[i]) + (np.zeros(c),),
           "gelu": lambda i: mt.ref_scale_bias_gelu_vjp(x[i], s[i], b[i], w[i])}[op]
    grads = jax.jit(jax.vmap(jax.grad(lambda x_, s_, b_, w_: jnp.sum(fn(x_, s_, b_) * w_), argnums=(0, 1, 2))))
    args = _put_all(device, x, s, b, w)
    got = [np.asarray(t) for t in grads(*args)]
    refs = [ref(i) for i in range(b_)]
    for k, what in enumerate(("dx", "per-example dscale", "per-example dbias")):
        mt.assert_close(got[k], np.stack([r[k] for r in refs]), GRAD_TOL[mt.F32], dtype=mt.F32, what=f"{op} {what}")
    for k, again in enumerate(grads(*args)):
        mt.assert_bitwise_equal(got[k], np.asarray(again), f"{op} gradient {k} run twice")


def test_vmap_grad_in_axes_1(device, rng):
    """vmap(grad) with the batch on axis 1 of x and the last axis of the cotangent."""
    x = mt.randn(rng, (N, B, C))
    s = mt.randn(rng, (C,), loc=1.0)
    w = mt.randn(rng, (N, C, B))

    def loss(x_, s_, w_):
        return jnp.sum(jm.layer_norm(x_, s_) * w_)

    ds = jax.jit(jax.vmap(jax.grad(loss, argnums=1), in_axes=(1, None, 2)))(*_put_all(device, x, s, w))
    want = np.stack([mt.ref_layer_norm_vjp(x[:, i], s, None, 1e-5, w[..., i])[1] for i in range(B)])
    mt.assert_close(ds, want, GRAD_TOL[mt.F32], dtype=mt.F32, what="per-example dscale")


# ----------------------------------------------------------------------------------------------
# jit, scan, checkpoint, value_and_grad
# ----------------------------------------------------------------------------------------------

OPS = ["softmax", "layer_norm", "rms_norm", "gelu"]


def _op(name, x, s, b):
    if name == "softmax":
        return jm.softmax(x)
    if name == "layer_norm":
        return jm.layer_norm(x, s, b)
    if name == "rms_norm":
        return jm.rms_norm(x, s)
    return jm.scale_bias_gelu(x, s, b)


def _ref(name, x, s, b):
    if name == "softmax":
        return mt.ref_softmax(x)
    if name == "layer_norm":
        return mt.ref_layer_norm(x, s, b)
    if name == "rms_norm":
        return mt.ref_rms_norm(x, s)
    return mt.ref_scale_bias_gelu(x, s, b)


def _ref_vjp(name, x, s, b, g):
    """(dx, dscale or None, dbias or None) and the dx magnitude for the tolerance."""
    if name == "softmax":
        return (mt.ref_softmax_vjp(x, g), None, None), mt.ref_softmax_vjp_mag(x, g)
    if name == "layer_norm":
        return mt.ref_layer_norm_vjp(x, s, b, 1e-5, g), mt.ref_layer_norm_vjp_mag(x, s, 1e-5, g)
    if name == "rms_norm":
        dx, ds = mt.ref_rms_norm_vjp(x, s, 1e-6, g)
        return (dx, ds, None), mt.ref_rms_norm_vjp_mag(x, s, 1e-6, g)
    return mt.ref_scale_bias_gelu_vjp(x, s, b, g), mt.ref_scale_bias_gelu_vjp_mag(x, s, b, g)


def _opargs(rng, shape):
    c = shape[-1]
    return mt.randn(rng, shape, scale=2.0), mt.randn(rng, (c,), loc=1.0, scale=0.5), mt.randn(rng, (c,))


@pytest.mark.parametrize("op", OPS)
def test_jit_matches_eager(device, rng, op):
    x, s, b = _put_all(device, *_opargs(rng, (3, 4, 41)))
    eager = _op(op, x, s, b)
    jitted = jax.jit(lambda *a: _op(op, *a))(x, s, b)
    np.testing.assert_allclose(mt.f64(eager), mt.f64(jitted), rtol=1e-6, atol=1e-7)
    # jit of jit, and the op twice in one program
    twice = jax.jit(lambda *a: _op(op, jax.jit(lambda *c: _op(op, *c))(*a), a[1], a[2]))(x, s, b)
    want = _ref(op, mt.round_to(_ref(op, *map(mt.f64, (x, s, b))), mt.F32), mt.f64(s), mt.f64(b))
    mt.assert_close(twice, want, 1e-4, dtype=mt.F32)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("op", OPS)
def test_scan(device, rng, op, dtype):
    """lax.scan over a stack of inputs: forward per slice, and grads of params through the scan."""
    T = 5
    xs = mt.randn(rng, (T, 3, 45), dtype, scale=2.0)
    s = mt.randn(rng, (45,), loc=1.0, scale=0.5)
    b = mt.randn(rng, (45,))
    ws = mt.randn(rng, (T, 3, 45), dtype, scale=1.0)

    def run(xs_, s_, b_, ws_):
        def body(carry, xw):
            x_, w_ = xw
            y = _op(op, x_, s_, b_)
            return carry + jnp.sum(y.astype(jnp.float32) * w_.astype(jnp.float32)), y

        return jax.lax.scan(body, jnp.float32(0), (xs_, ws_))

    args = _put_all(device, xs, s, b, ws)
    total, ys = jax.jit(run)(*args)
    assert ys.shape == xs.shape and ys.dtype == xs.dtype
    want = np.stack([_ref(op, xs[t], s, b) for t in range(T)])
    mag = np.stack([mt.ref_scale_bias_gelu_mag(xs[t], s, b) for t in range(T)]) if op == "gelu" else None
    mt.assert_close(ys, want, FWD_TOL[dtype], dtype=dtype, mag=mag)

    grads = jax.jit(jax.grad(lambda *a: run(*a)[0], argnums=(0, 1, 2)))(*args)
    refs = [_ref_vjp(op, xs[t], s, b, ws[t]) for t in range(T)]
    mag = None if refs[0][1] is None else np.stack([r[1] for r in refs])
    mt.assert_close(grads[0], np.stack([r[0][0] for r in refs]), GRAD_TOL[dtype], dtype=dtype, what="dxs", mag=mag)
    for k, name in ((1, "dscale"), (2, "dbias")):
        if refs[0][0][k] is not None:
            mt.assert_close(grads[k], sum(r[0][k] for r in refs), GRAD_TOL[dtype], dtype=mt.F32, what=name)
        else:  # op does not use this parameter
            np.testing.assert_array_equal(mt.f64(grads[k]), 0.0)


@pytest.mark.parametrize("op", OPS)
def test_checkpoint_grad(device, rng, op):
    x, s, b = _opargs(rng, (4, 3, 53))
    w = mt.randn(rng, x.shape)

    def loss(x_, s_, b_, w_):
        return jnp.sum(_op(op, x_, s_, b_) * w_)

    args = _put_all(device, x, s, b, w)
    plain = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))(*args)
    for policy in (None, jax.checkpoint_policies.nothing_saveable, jax.checkpoint_policies.everything_saveable):
        ck = jax.jit(jax.grad(jax.checkpoint(loss, policy=policy), argnums=(0, 1, 2)))(*args)
        (rdx, rds, rdb), mag = _ref_vjp(op, x, s, b, w)
        mt.assert_close(ck[0], rdx, GRAD_TOL[mt.F32], dtype=mt.F32, what="dx", mag=mag)
        for k, r in ((1, rds), (2, rdb)):
            if r is not None:
                mt.assert_close(ck[k], r, GRAD_TOL[mt.F32], dtype=mt.F32)
        for a, p in zip(ck, plain):
            np.testing.assert_allclose(mt.f64(a), mt.f64(p), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op", OPS)
def test_value_and_grad(device, rng, op):
    x, s, b = _opargs(rng, (6, 70))
    w = mt.randn(rng, x.shape)
    args = _put_all(device, x, s, b, w)
    val, grads = jax.jit(jax.value_and_grad(lambda x_, s_, b_, w_: jnp.sum(_op(op, x_, s_, b_) * w_), argnums=(0, 1, 2)))(*args)
    np.testing.assert_allclose(float(val), float(np.sum(_ref(op, x, s, b) * mt.f64(w))), rtol=1e-4, atol=1e-4)
    (rdx, rds, rdb), mag = _ref_vjp(op, x, s, b, w)
    mt.assert_close(grads[0], rdx, GRAD_TOL[mt.F32], dtype=mt.F32, mag=mag)


def test_grad_through_composition(device, rng):
    """A small block: layer_norm -> gelu -> rms_norm -> softmax, grads vs the pure-jnp formulation."""
    x = mt.randn(rng, (6, 48))
    s1, b1 = mt.randn(rng, (48,), loc=1.0), mt.randn(rng, (48,))
    s2, b2 = mt.randn(rng, (48,), loc=1.0), mt.randn(rng, (48,))
    s3 = mt.randn(rng, (48,), loc=1.0)
    w = mt.randn(rng, (6, 48))

    def block(ln, gelu, rms, sm):
        def f(x_, s1_, b1_, s2_, b2_, s3_):
            h = ln(x_, s1_, b1_)
            h = gelu(h, s2_, b2_)
            h = rms(h, s3_)
            return jnp.sum(sm(h) * w)

        return f

    ours = block(jm.layer_norm, jm.scale_bias_gelu, jm.rms_norm, jm.softmax)
    xla = block(mt.jnp_layer_norm, mt.jnp_scale_bias_gelu, mt.jnp_rms_norm, mt.jnp_softmax)
    args = _put_all(device, x, s1, b1, s2, b2, s3)
    got = jax.jit(jax.grad(ours, argnums=tuple(range(6))))(*args)
    want = jax.jit(jax.grad(xla, argnums=tuple(range(6))))(*args)
    for i, (a, r) in enumerate(zip(got, want)):
        assert mt.rel_err(a, mt.f64(r)) < 1e-4, f"argument {i}: rel err {mt.rel_err(a, mt.f64(r)):.2e}"


# ----------------------------------------------------------------------------------------------
# second-order AD
# ----------------------------------------------------------------------------------------------


def test_hessian_softmax(device, rng):
    x = mt.randn(rng, (2, 5))
    w = mt.randn(rng, (2, 5))
    xd, wd = _put_all(device, x, w)
    got = jax.jit(jax.hessian(lambda t: jnp.sum(jm.softmax(t) * wd)))(xd)
    want = jax.jit(jax.hessian(lambda t: jnp.sum(mt.jnp_softmax(t) * wd)))(xd)
    assert got.shape == (2, 5, 2, 5)
    assert mt.rel_err(got, mt.f64(want)) < 1e-4


@pytest.mark.parametrize("axis", [0, 1])
def test_grad_of_grad_softmax(device, rng, axis):
    x = mt.randn(rng, (3, 6))
    w = mt.randn(rng, (3, 6))
    v = mt.randn(rng, (3, 6))
    xd, wd, vd = _put_all(device, x, w, v)

    def hvp(sm):
        g = jax.grad(lambda t: jnp.sum(sm(t, axis) * wd))
        return jax.grad(lambda t: jnp.sum(g(t) * vd))

    got = jax.jit(hvp(jm.softmax))(xd)
    want = jax.jit(hvp(mt.jnp_softmax))(xd)
    assert mt.rel_err(got, mt.f64(want)) < 1e-4


@pytest.mark.parametrize("with_params", [True, False])
def test_hessian_layer_norm(device, rng, with_params):
    x = mt.randn(rng, (2, 6))
    s = mt.randn(rng, (6,), loc=1.0) if with_params else None
    b = mt.randn(rng, (6,)) if with_params else None
    w = mt.randn(rng, (2, 6))
    xd, sd, bd, wd = _put_all(device, x, s, b, w)
    got = jax.jit(jax.hessian(lambda t: jnp.sum(jm.layer_norm(t, sd, bd, epsilon=1e-3) * wd)))(xd)
    want = jax.jit(jax.hessian(lambda t: jnp.sum(mt.jnp_layer_norm(t, sd, bd, eps=1e-3) * wd)))(xd)
    assert got.shape == (2, 6, 2, 6)
    assert mt.rel_err(got, mt.f64(want)) < 1e-4


@pytest.mark.parametrize("dtype", [mt.F32, mt.BF16], ids=["f32", "bf16"])
def test_grad_of_row_sum_of_layer_norm_grad_is_zero(device, rng, dtype):
    """LayerNorm's dx sums to 0 over each row whatever x is, so the gradient of that sum is 0: second-order AD must not
    carry the kernels' pivot x[..., 0] (which cancels) as large terms rounded to x's dtype at each use (a bf16 x
    gave 16 at x[..., 0] where max|g| is 1704: 1.2 bf16 eps, 8e4 float32 eps)."""
    x = jax.device_put(mt.randn(rng, (3, 7, 129), dtype, scale=2.0, loc=0.5), device)
    s = jax.device_put(mt.randn(rng, (129,), loc=1.0), device)
    loss = lambda t: jnp.sum(jm.layer_norm(t, s).astype(jnp.float32) ** 3)  # noqa: E731
    g = jax.jit(jax.grad(loss))(x)
    h = jax.jit(jax.grad(lambda t: jnp.sum(jax.grad(loss)(t).astype(jnp.float32))))(x)
    # float32 rounding noise (the references compute in float32 for either dtype): ~1 eps of max|g| measured
    bound = 16 * float(jnp.finfo(jnp.float32).eps) * float(jnp.max(jnp.abs(g.astype(jnp.float32))))
    assert float(jnp.max(jnp.abs(h.astype(jnp.float32)))) <= bound


def test_grad_of_grad_layer_norm_params(device, rng):
    """d/d(scale, x) of <grad_x loss, v>: mixed second derivatives through the backward kernel."""
    x = mt.randn(rng, (4, 9))
    s, b = mt.randn(rng, (9,), loc=1.0), mt.randn(rng, (9,))
    w, v = mt.randn(rng, (4, 9)), mt.randn(rng, (4, 9))
    xd, sd, bd, wd, vd = _put_all(device, x, s, b, w, v)

    def outer(ln):
        def inner(x_, s_, b_):
            return jnp.sum(ln(x_, s_, b_) * wd)

        return jax.grad(lambda x_, s_, b_: jnp.sum(jax.grad(inner)(x_, s_, b_) * vd), argnums=(0, 1, 2))

    got = jax.jit(outer(jm.layer_norm))(xd, sd, bd)
    want = jax.jit(outer(mt.jnp_layer_norm))(xd, sd, bd)
    for name, a, r in zip(("d2x", "dxds", "dxdb"), got, want):
        r64 = mt.f64(r)
        if np.linalg.norm(r64) == 0:
            assert np.abs(mt.f64(a)).max() < 1e-5, name
        else:
            assert mt.rel_err(a, r64) < 1e-4, name


@pytest.mark.parametrize("mode", ["hessian", "grad_of_grad"])
@pytest.mark.parametrize("op", ["rms_norm", "gelu"])
def test_second_order_other_ops(device, rng, op, mode):
    """Second-order AD of rms_norm / gelu (hessian = forward-over-reverse, and grad of grad) is
    supported and equals XLA's second derivatives."""
    x = mt.randn(rng, (2, 5))
    s = mt.randn(rng, (5,), loc=1.0)
    b = mt.randn(rng, (5,))
    w = mt.randn(rng, (2, 5))
    v = mt.randn(rng, (2, 5))
    xd, sd, bd, wd, vd = _put_all(device, x, s, b, w, v)
    if op == "rms_norm":
        ours, xla = (lambda t: jnp.sum(jm.rms_norm(t, sd) * wd)), (lambda t: jnp.sum(mt.jnp_rms_norm(t, sd) * wd))
    else:
        ours = lambda t: jnp.sum(jm.scale_bias_gelu(t, sd, bd) * wd)  # noqa: E731
        xla = lambda t: jnp.sum(mt.jnp_scale_bias_gelu(t, sd, bd) * wd)  # noqa: E731

    def second(f):
        if mode == "hessian":
            return jax.hessian(f)
        return jax.grad(lambda t: jnp.sum(jax.grad(f)(t) * vd))

    got = jax.jit(second(ours))(xd)
    want = jax.jit(second(xla))(xd)
    assert mt.rel_err(got, mt.f64(want)) < 1e-4


# ----------------------------------------------------------------------------------------------
# eager calls: one trace per shape and static arguments
# ----------------------------------------------------------------------------------------------

EAGER_OPS = {
    "softmax": ("jax_memops.softmax", "_softmax_last", lambda x, p: jm.softmax(x, axis=(0, 1))),
    "layer_norm": ("jax_memops.norms", "_layer_norm", lambda x, p: jm.layer_norm(x, p, p, epsilon=1e-5)),
    "layer_norm-axes": ("jax_memops.norms", "_layer_norm", lambda x, p: jm.layer_norm(x, axis=(1, 2))),
    "rms_norm": ("jax_memops.norms", "_rms_norm", lambda x, p: jm.rms_norm(x, p, epsilon=1e-6)),
    "scale_bias_gelu": ("jax_memops.gelu", "_scale_bias_gelu", lambda x, p: jm.scale_bias_gelu(x, p, 0.5)),
}


@pytest.mark.parametrize("op", list(EAGER_OPS))
def test_eager_calls_are_traced_once(device, rng, monkeypatch, op):
    """Eager calls enter a jitted function once their arguments are checked, so repeated calls reuse its compiled
    program (a call through custom_jvp and the primitive's own dispatch each time took ~7x jax.nn.softmax's eager
    time): the op's inner function is traced at most once, for the first call, and every call gives the same."""
    import importlib

    module, name, call = EAGER_OPS[op]
    module = importlib.import_module(module)
    traced = []
    inner = getattr(module, name)
    monkeypatch.setattr(module, name, lambda *a, **k: (traced.append(1), inner(*a, **k))[1])
    x, p = mt.randn(rng, (3, 5, 71)), mt.randn(rng, (71,), scale=0.5, loc=1.0)  # a shape of this test's own
    xd, pd = jax.device_put(x, device), jax.device_put(p, device)
    first = np.asarray(call(xd, pd))
    assert len(traced) <= 1  # 0 where an earlier device's run of this test traced it already
    again = [np.asarray(call(xd, pd)) for _ in range(2)]
    assert len(traced) <= 1, f"{op}: traced again by later eager calls ({len(traced)} traces)"
    for o in again:
        np.testing.assert_array_equal(o, first)
