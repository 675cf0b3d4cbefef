"""Forward-mode AD of every op — jax.jvp, jax.jacfwd, jax.linearize, forward over forward, under vmap —
against float64 NumPy tangents (themselves checked against central differences), and what reverse mode
keeps: grad still lowers to one forward and one backward custom call, because each op's tangent map is
a primitive that grad transposes into the backward kernel (softmax's tangent map is the backward kernel).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_memops as jm
import memops_testing as mt
from memops_testing import BF16, DTYPE_IDS, DTYPES, F16, F32, FWD_TOL, GRAD_TOL


@dataclass(frozen=True)
class Op:
    ours: Callable      # (x, *params) -> y, params float32 (C,)
    jnp_fn: Callable    # the same in plain jax.numpy (XLA's formulation)
    ref: Callable       # float64 forward (x, *params)
    ref_jvp: Callable   # float64 (x, params, t, param tangents) -> (tangent, magnitude of its terms)
    params: int = 0     # how many (C,) array parameters


OPS = {
    "softmax": Op(lambda x: jm.softmax(x), mt.jnp_softmax, mt.ref_softmax,
                  lambda x, p, t, tp: mt.ref_softmax_jvp(x, t)),
    "softmax_axis0": Op(lambda x: jm.softmax(x, 0), lambda x: mt.jnp_softmax(x, 0), lambda x: mt.ref_softmax(x, 0),
                        lambda x, p, t, tp: mt.ref_softmax_jvp(x, t, 0)),
    "layer_norm": Op(lambda x, s, b: jm.layer_norm(x, s, b), mt.jnp_layer_norm, mt.ref_layer_norm,
                     lambda x, p, t, tp: mt.ref_layer_norm_jvp(x, p[0], t, *tp), 2),
    "layer_norm_plain": Op(lambda x: jm.layer_norm(x), mt.jnp_layer_norm, mt.ref_layer_norm,
                           lambda x, p, t, tp: mt.ref_layer_norm_jvp(x, None, t)),
    "rms_norm": Op(lambda x, s: jm.rms_norm(x, s), mt.jnp_rms_norm, mt.ref_rms_norm,
                   lambda x, p, t, tp: mt.ref_rms_norm_jvp(x, p[0], t, *tp), 1),
    "gelu": Op(lambda x, s, b: jm.scale_bias_gelu(x, s, b), mt.jnp_scale_bias_gelu, mt.ref_scale_bias_gelu,
               lambda x, p, t, tp: mt.ref_scale_bias_gelu_jvp(x, p[0], p[1], t, *tp), 2),
    "gelu_numbers": Op(lambda x: jm.scale_bias_gelu(x, 1.5, -0.25),
                       lambda x: mt.jnp_scale_bias_gelu(x, 1.5, -0.25),
                       lambda x: mt.ref_scale_bias_gelu(x, 1.5, -0.25),
                       lambda x, p, t, tp: mt.ref_scale_bias_gelu_jvp(x, 1.5, -0.25, t)),
}
SHAPES = [(3, 1), (1, 2), (2, 33), (4, 3, 100), (5, 4097)]


def _inputs(rng, op, shape, dtype=F32):
    """x, params, t, param tangents: fresh random values (scale ~1 + noise, bias and tangents noise)."""
    c = shape[-1]
    x = mt.randn(rng, shape, dtype, scale=2.0)
    params = [mt.randn(rng, (c,), F32, loc=1.0, scale=0.5), mt.randn(rng, (c,), F32, scale=0.5)][:op.params]
    t = mt.randn(rng, shape, dtype, scale=1.0)
    tps = [mt.randn(rng, (c,), F32) for _ in range(op.params)]
    return x, params, t, tps


def _put(device, *arrays):
    return tuple(jax.device_put(a, device) for a in arrays)


def _jvp(op):
    return jax.jit(lambda p, t: jax.jvp(op.ours, p, t))


def _check_value(name, device, y, forward, ref, dtype):
    """jvp's y: the forward kernel's bits, but for the norms on the GPU, whose one-pass kernel sums in another order
    than the forward's kernels: there within the forward's tolerance of the float64 reference."""
    if device.platform == "gpu" and "norm" in name:
        mt.assert_close(y, ref, FWD_TOL[dtype], dtype=dtype, what="y")
    else:
        mt.assert_bitwise_equal(y, forward, "y")


def _check_tangent(op, got, x, params, t, tps, dtype, what="tangent"):
    want, mag = op.ref_jvp(x, params, t, tps)
    assert got.dtype == x.dtype, what
    mt.assert_close(got, want, GRAD_TOL[dtype], dtype=dtype, what=what, mag=mag)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("shape", SHAPES, ids=["x".join(map(str, s)) for s in SHAPES])
@pytest.mark.parametrize("name", OPS)
def test_jvp(device, rng, name, shape, dtype):
    op = OPS[name]
    x, params, t, tps = _inputs(rng, op, shape, dtype)
    y, ty = _jvp(op)(_put(device, x, *params), _put(device, t, *tps))
    _check_value(name, device, y, jax.jit(op.ours)(*_put(device, x, *params)), op.ref(x, *params), dtype)
    _check_tangent(op, ty, x, params, t, tps, dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("shape", [(2, 50257), (2, 70001), (0, 8), (1, 1)], ids=["2x50257", "2x70001", "0x8", "1x1"])
@pytest.mark.parametrize("name", ["layer_norm", "rms_norm", "gelu"])
def test_jvp_long_empty_and_nan_rows(device, rng, name, shape, dtype):
    """The one-pass custom calls (y and its tangent) on long odd rows (70001: the CPU's sums by column tiles), no rows,
    one element; a NaN in x poisons its own row of y and of the tangent only."""
    op = OPS[name]
    x, params, t, tps = _inputs(rng, op, shape, dtype)
    if x.size and shape[0] > 1:
        x[0, shape[1] // 2] = np.nan
    y, ty = _jvp(op)(_put(device, x, *params), _put(device, t, *tps))
    _check_value(name, device, y, jax.jit(op.ours)(*_put(device, x, *params)), op.ref(x, *params), dtype)
    _check_tangent(op, ty, x, params, t, tps, dtype)


@pytest.mark.parametrize("dtypes", [(BF16, F32), (F32, BF16), (F16, F32), (F32, F16)],
                         ids=["bf16-f32", "f32-bf16", "f16-f32", "f32-f16"])
@pytest.mark.parametrize("rms", [False, True], ids=["layer_norm", "rms_norm"])
def test_jvp_norm_out_dtype(device, rng, rms, dtypes):
    """dtype=: y and its tangent come out in the output dtype from x and its tangent in x's; y is the forward's (see
    _check_value), and the tangent is within that dtype's tolerance of the float64 one."""
    x_dtype, y_dtype = dtypes
    x, t = mt.randn(rng, (3, 37), x_dtype), mt.randn(rng, (3, 37), x_dtype, scale=1.0)
    s, b, ts, tb = mt.randn(rng, (37,), loc=1.0, scale=0.5), mt.randn(rng, (37,)), mt.randn(rng, (37,)), mt.randn(
        rng, (37,))
    if rms:
        fn, args, tans = (lambda a, c: jm.rms_norm(a, c, dtype=y_dtype)), (x, s), (t, ts)
        want, mag = mt.ref_rms_norm_jvp(x, s, t, ts)
    else:
        fn, args, tans = (lambda a, c, d: jm.layer_norm(a, c, d, dtype=y_dtype)), (x, s, b), (t, ts, tb)
        want, mag = mt.ref_layer_norm_jvp(x, s, t, ts, tb)
    y, ty = jax.jit(lambda p, q: jax.jvp(fn, p, q))(_put(device, *args), _put(device, *tans))
    assert y.dtype == ty.dtype == y_dtype
    ref = mt.ref_rms_norm(x, s) if rms else mt.ref_layer_norm(x, s, b)
    _check_value("norm", device, y, jax.jit(fn)(*_put(device, *args)), ref, np.dtype(y_dtype))
    tol = max(GRAD_TOL[np.dtype(x_dtype)], GRAD_TOL[np.dtype(y_dtype)])
    mt.assert_close(ty, want, tol, dtype=np.dtype(y_dtype), what="tangent", mag=mag)


@pytest.mark.parametrize("name", ["softmax", "softmax_axis0"])
def test_jvp_softmax_masked(device, rng, name):
    """-inf entries get a zero tangent, a NaN or all -inf row a NaN tangent, huge logits stay finite."""
    op = OPS[name]
    x = mt.randn(rng, (6, 40), scale=3.0)
    x[0, ::3] = -np.inf
    x[1, :] = -np.inf
    x[2, 5] = np.nan
    x[3, 7] = 1e30
    x[4, :] += 1e4
    if name == "softmax_axis0":
        x = np.ascontiguousarray(x.T)
    t = mt.randn(rng, x.shape, scale=1.0)
    _, ty = _jvp(op)(_put(device, x), _put(device, t))
    _check_tangent(op, ty, x, [], t, [], F32)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("fixed", ["numbers", "arrays"])
def test_jvp_gelu_infinite_x_with_fixed_parameters(device, rng, fixed, dtype):
    """scale and bias held fixed (Python numbers, or arrays closed over) and x = +-inf: the tangent is
    gelu'(u) * tx * scale, i.e. tx * scale at u = +inf and 0 at u = -inf, as the backward kernel's gradient has it
    (the kernels once formed x * 0 for the absent scale tangent: NaN). jvp (the one-pass kernel), linearize (the
    tangent map) and vjp (the backward; the Jacobian is diagonal) agree."""
    x, t = mt.randn(rng, (3, 37), dtype, scale=2.0), mt.randn(rng, (3, 37), dtype, scale=1.0)
    x[0, ::4], x[1, 1::5] = np.inf, -np.inf
    if fixed == "numbers":
        s, b = np.full(37, 1.5, F32), np.full(37, -0.25, F32)
        fn = lambda a: jm.scale_bias_gelu(a, 1.5, -0.25)  # noqa: E731
    else:
        s, b = np.abs(mt.randn(rng, (37,), loc=1.0, scale=0.5)) + 0.1, mt.randn(rng, (37,), scale=0.5)
        sd, bd = _put(device, s, b)
        fn = lambda a: jm.scale_bias_gelu(a, sd, bd)  # noqa: E731
    want, mag = mt.ref_scale_bias_gelu_jvp(np.where(np.isinf(x), 0, x), s, b, t)
    want = np.where(x == np.inf, mt.f64(t) * s, np.where(x == -np.inf, 0.0, want))
    mag = np.where(np.isinf(x), np.abs(want), mag)
    xd, td = _put(device, x, t)
    _, ty = jax.jit(lambda a, u: jax.jvp(fn, (a,), (u,)))(xd, td)
    lin = jax.jit(lambda a, u: jax.linearize(fn, a)[1](u))(xd, td)
    back = jax.jit(lambda a, u: jax.vjp(fn, a)[1](u)[0])(xd, td)
    for got, what in ((ty, "jvp"), (lin, "linearize"), (back, "vjp")):
        mt.assert_close(got, want, GRAD_TOL[dtype], dtype=dtype, what=what, mag=mag)


@pytest.mark.parametrize("rms", [False, True], ids=["layer_norm", "rms_norm"])
def test_jvp_norm_large_mean_tiny_variance(device, rng, rms):
    """x = 1e4 + 1e-2 * noise, eps = 1e-12: the tangent, like the output, stays accurate (the statistics
    are taken about the row's first element, not as E[x^2] - E[x]^2)."""
    x = (1e4 + 1e-2 * rng.standard_normal((6, 257))).astype(np.float32)
    s, b = mt.randn(rng, (257,), loc=1.0, scale=0.5), mt.randn(rng, (257,))
    t, ts, tb = mt.randn(rng, x.shape), mt.randn(rng, (257,)), mt.randn(rng, (257,))
    if rms:
        fn, args, tans = (lambda a, c: jm.rms_norm(a, c, epsilon=1e-12)), (x, s), (t, ts)
        want, mag = mt.ref_rms_norm_jvp(x, s, t, ts, eps=1e-12)
    else:
        fn, args, tans = (lambda a, c, d: jm.layer_norm(a, c, d, epsilon=1e-12)), (x, s, b), (t, ts, tb)
        want, mag = mt.ref_layer_norm_jvp(x, s, t, ts, tb, eps=1e-12)
    _, ty = jax.jit(lambda p, q: jax.jvp(fn, p, q))(_put(device, *args), _put(device, *tans))
    mt.assert_close(ty, want, 1e-3, dtype=F32, what="tangent", mag=mag)


@pytest.mark.parametrize("name", OPS)
def test_reference_tangents_match_finite_differences(rng, name):
    """The float64 tangents the other tests trust, against central differences of the forward references."""
    op = OPS[name]
    x, params, t, tps = (mt.f64(a) if not isinstance(a, list) else [mt.f64(p) for p in a]
                         for a in _inputs(rng, op, (3, 17)))
    h = 1e-6
    plus = op.ref(x + h * t, *(p + h * q for p, q in zip(params, tps)))
    minus = op.ref(x - h * t, *(p - h * q for p, q in zip(params, tps)))
    want, _ = op.ref_jvp(x, params, t, tps)
    assert mt.rel_err((plus - minus) / (2 * h), want) < 1e-7


@pytest.mark.parametrize("name", OPS)
def test_jacfwd_matches_jacrev(device, rng, name):
    """Forward mode (the tangent maps) and reverse mode (the backward kernels) give one Jacobian."""
    op = OPS[name]
    x, params, _, _ = _inputs(rng, op, (3, 6))
    args = _put(device, x, *params)
    argnums = tuple(range(len(args)))
    fwd = jax.jit(jax.jacfwd(op.ours, argnums=argnums))(*args)
    rev = jax.jit(jax.jacrev(op.ours, argnums=argnums))(*args)
    for i, (a, b) in enumerate(zip(fwd, rev)):
        assert a.shape == x.shape + args[i].shape
        assert mt.rel_err(a, mt.f64(b)) < 1e-5, f"argument {i}"


@pytest.mark.parametrize("name", OPS)
def test_linearize(device, rng, name):
    op = OPS[name]
    x, params, t, tps = _inputs(rng, op, (4, 33))
    y, f_jvp = jax.linearize(op.ours, *_put(device, x, *params))
    mt.assert_bitwise_equal(y, jax.jit(op.ours)(*_put(device, x, *params)), "y")
    _check_tangent(op, f_jvp(*_put(device, t, *tps)), x, params, t, tps, F32)


@pytest.mark.parametrize("name", OPS)
def test_jvp_under_vmap(device, rng, name):
    """vmap of jvp and jvp of vmap, with x, the parameters and every tangent batched."""
    op = OPS[name]
    b, shape = 3, (4, 33)
    x, t = mt.randn(rng, (b, *shape)), mt.randn(rng, (b, *shape), scale=1.0)
    params = [mt.randn(rng, (b, 33), loc=1.0, scale=0.5), mt.randn(rng, (b, 33), scale=0.5)][:op.params]
    tps = [mt.randn(rng, (b, 33)) for _ in range(op.params)]
    xs, ts = _put(device, x, *params), _put(device, t, *tps)
    inner = jax.jit(jax.vmap(lambda p, q: jax.jvp(op.ours, p, q)[1]))(xs, ts)
    outer = jax.jit(lambda p, q: jax.jvp(jax.vmap(op.ours), p, q)[1])(xs, ts)
    for got, what in ((inner, "vmap of jvp"), (outer, "jvp of vmap")):
        for i in range(b):
            _check_tangent(op, got[i], x[i], [p[i] for p in params], t[i], [q[i] for q in tps], F32,
                           what=f"{what}, example {i}")


@pytest.mark.parametrize("name", OPS)
def test_forward_over_forward(device, rng, name):
    """jacfwd of jacfwd: the tangent maps' own JVPs (second derivatives) equal XLA's."""
    op = OPS[name]
    x, params, _, _ = _inputs(rng, op, (2, 5))
    w = mt.randn(rng, x.shape)
    xd, wd, *pd = _put(device, x, w, *params)
    got = jax.jit(jax.jacfwd(jax.jacfwd(lambda a: jnp.sum(op.ours(a, *pd) * wd))))(xd)
    want = jax.jit(jax.hessian(lambda a: jnp.sum(op.jnp_fn(a, *pd) * wd)))(xd)
    assert mt.rel_err(got, mt.f64(want)) < 1e-4


def _calls(fn, *args, platform=None):
    """{jax_memops target: how many custom calls} in the jitted fn's StableHLO (lowered for `platform`, or the default
    device's)."""
    traced = jax.jit(fn).trace(*args)
    text = (traced.lower() if platform is None else traced.lower(lowering_platforms=(platform,))).as_text()
    found = (re.findall(r"stablehlo\.custom_call\s+@(jax_memops_\w+)", text)
             + re.findall(r'call_target_name\s*=\s*"(jax_memops_\w+)"', text))
    return {k: found.count(k) for k in set(found)}


def _target(name):
    return "jax_memops_" + {"layer_norm_plain": "layer_norm", "softmax_axis0": "softmax",
                            "gelu_numbers": "gelu"}.get(name, name)


@pytest.mark.parametrize("batched", [False, True], ids=["plain", "vmap"])
@pytest.mark.parametrize("name", OPS)
def test_grad_keeps_one_forward_and_one_backward_call(rng, name, batched):
    """Reverse mode transposes the tangent map into the backward kernel: one forward and one backward
    custom call, as a custom_vjp gives (also for grad of vmap with per-example parameters)."""
    op = OPS[name]
    x, params, _, _ = _inputs(rng, op, (4, 33))
    if batched:
        x = np.stack([x, x + 1])
        params = [np.stack([p, 2 * p]) for p in params]
        fn = jax.vmap(op.ours)
    else:
        fn = op.ours
    loss = jax.grad(lambda *a: jnp.sum(fn(*a) * jnp.cos(a[0])), argnums=tuple(range(1 + len(params))))
    assert _calls(loss, x, *params) == {_target(name) + "_fwd": 1, _target(name) + "_bwd": 1}


@pytest.mark.parametrize("platform", ["cpu", "cuda"])
@pytest.mark.parametrize("name", OPS)
def test_jvp_calls(rng, name, platform):
    """jax.jvp runs one custom call that makes y and its tangent (x and its tangent read once) on both platforms
    (lowered from this machine's CPU); softmax its forward kernel and then its backward kernel as the tangent map."""
    op = OPS[name]
    x, params, t, tps = _inputs(rng, op, (4, 33))
    target = _target(name)
    want = {target + "_fwd": 1, target + "_bwd": 1} if name.startswith("softmax") else {target + "_jvp": 1}
    assert _calls(lambda p, q: jax.jvp(op.ours, p, q), (x, *params), (t, *tps), platform=platform) == want
