"""Shared helpers of the jax_memops test suite.

* float64 NumPy references (forward and VJP) of every op, independent of JAX and of jax_memops;
* input generation (fresh normal data rounded to the op's dtype, so that the reference sees exactly
  the input the op sees);
* comparison helpers: relative error ||out - ref|| / ||ref|| plus per-row max-abs checks, with
  per-dtype tolerances, and NaN / inf patterns that must match exactly;
* poison: NaN in device memory just freed, so an output element a kernel leaves unwritten shows;
* run_script: a check script in a fresh interpreter, for the kernels' A/B environment variables.

This module imports no jax_memops, and JAX only inside poison (the references are NumPy).
"""

from __future__ import annotations

import math
import os
import subprocess
import sys

import ml_dtypes
import numpy as np

# ----------------------------------------------------------------------------------------------
# dtypes and tolerances
# ----------------------------------------------------------------------------------------------

F32 = np.dtype(np.float32)
BF16 = np.dtype(ml_dtypes.bfloat16)
F16 = np.dtype(np.float16)
F64 = np.dtype(np.float64)

DTYPES = (F32, BF16, F16)
DTYPE_IDS = ("f32", "bf16", "f16")

# Relative (norm-wise) tolerances of forward outputs against the float64 reference.
FWD_TOL = {F32: 1e-5, BF16: 1e-2, F16: 2e-3}
# Relative tolerances of gradients (against the float64 reference of the same rounded inputs).
GRAD_TOL = {F32: 5e-5, BF16: 3e-2, F16: 5e-3}

SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
GELU_C = 0.044715


def dtype_id(dt) -> str:
    return {F32: "f32", BF16: "bf16", F16: "f16"}.get(np.dtype(dt), np.dtype(dt).name)


# ----------------------------------------------------------------------------------------------
# inputs
# ----------------------------------------------------------------------------------------------


def randn(rng: np.random.Generator, shape, dtype=F32, scale: float = 2.0, loc: float = 0.0) -> np.ndarray:
    """Normal data (loc + scale * N(0, 1)) rounded to `dtype` (a NumPy array of that dtype)."""
    a = loc + scale * rng.standard_normal(size=shape)
    return np.asarray(a, dtype=np.float32).astype(np.dtype(dtype))


def f64(a) -> np.ndarray:
    """Any array-like (JAX array, bf16 NumPy array, ...) as a float64 NumPy array."""
    return np.asarray(a).astype(np.float64)


def round_to(a, dtype) -> np.ndarray:
    """float64 values rounded to `dtype` and back to float64 (the representational error)."""
    return np.asarray(a, dtype=np.float64).astype(np.dtype(dtype)).astype(np.float64)


# ----------------------------------------------------------------------------------------------
# float64 NumPy references
# ----------------------------------------------------------------------------------------------


def ref_softmax(x, axis: int = -1) -> np.ndarray:
    """softmax with jax.nn.softmax's semantics: -inf entries give 0, an all -inf row gives NaN,
    a NaN anywhere in a row makes that row NaN."""
    x = f64(x)
    if x.size == 0:
        return np.zeros_like(x)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        m = np.max(x, axis=axis, keepdims=True)
        e = np.exp(x - m)
        return e / np.sum(e, axis=axis, keepdims=True)


def ref_softmax_vjp(x, g, axis: int = -1) -> np.ndarray:
    y = ref_softmax(x, axis)
    g = f64(g)
    if y.size == 0:
        return np.zeros_like(y)
    with np.errstate(invalid="ignore"):
        return y * (g - np.sum(g * y, axis=axis, keepdims=True))


def ref_softmax_vjp_mag(x, g, axis: int = -1) -> np.ndarray:
    """Magnitude of the terms of y * (g - sum(g * y)) (condition-aware scale of the error)."""
    y = ref_softmax(x, axis)
    g = np.abs(f64(g))
    if y.size == 0:
        return np.zeros_like(y)
    with np.errstate(invalid="ignore"):
        return y * (g + np.sum(g * y, axis=axis, keepdims=True))


def _rows(a: np.ndarray) -> np.ndarray:
    return a.reshape(-1, a.shape[-1]) if a.shape[-1] else a.reshape(-1, 0)


def _param(p, c):
    return np.ones(c) if p is None else f64(p)


def _last(x, scale, bias, eps, rms, g=None):
    """ref_norm_axes over the last axis of a non-empty x (g: zeros where only y is wanted)."""
    x = f64(x)
    return ref_norm_axes(x, scale, bias, (x.ndim - 1,), eps, rms, np.zeros_like(x) if g is None else g)


def ref_layer_norm(x, scale=None, bias=None, eps: float = 1e-5) -> np.ndarray:
    return np.zeros_like(f64(x)) if np.size(x) == 0 else _last(x, scale, bias, eps, False)[0]


def ref_layer_norm_vjp(x, scale, bias, eps, g):
    """Returns (dx, dscale, dbias); dscale/dbias are None when scale/bias is None."""
    c = np.shape(x)[-1]
    if np.size(x) == 0:
        dx, ds, db = np.zeros_like(f64(x)), np.zeros(c), np.zeros(c)
    else:
        _, dx, ds, db, _ = _last(x, scale, bias, eps, False, g)
    return dx, (None if scale is None else ds), (None if bias is None else db)


def ref_layer_norm_vjp_mag(x, scale, eps, g) -> np.ndarray:
    """Magnitude of the terms of layer_norm's dx (condition-aware scale of the error)."""
    return np.zeros_like(f64(x)) if np.size(x) == 0 else _last(x, scale, None, eps, False, g)[4]


def ref_rms_norm(x, scale=None, eps: float = 1e-6) -> np.ndarray:
    return np.zeros_like(f64(x)) if np.size(x) == 0 else _last(x, scale, None, eps, True)[0]


def ref_rms_norm_vjp(x, scale, eps, g):
    """Returns (dx, dscale); dscale is None when scale is None."""
    if np.size(x) == 0:
        dx, ds = np.zeros_like(f64(x)), np.zeros(np.shape(x)[-1])
    else:
        _, dx, ds, _, _ = _last(x, scale, None, eps, True, g)
    return dx, (None if scale is None else ds)


def ref_rms_norm_vjp_mag(x, scale, eps, g) -> np.ndarray:
    """Magnitude of the terms of rms_norm's dx (condition-aware scale of the error)."""
    return np.zeros_like(f64(x)) if np.size(x) == 0 else _last(x, scale, None, eps, True, g)[4]


def _gelu_u(x, scale, bias):
    s = scale if isinstance(scale, (int, float)) else f64(scale)
    b = bias if isinstance(bias, (int, float)) else f64(bias)
    return x * s + b


def ref_gelu(u) -> np.ndarray:
    u = f64(u)
    return 0.5 * u * (1.0 + np.tanh(SQRT_2_OVER_PI * (u + GELU_C * u**3)))


def ref_gelu_grad(u) -> np.ndarray:
    u = f64(u)
    t = np.tanh(SQRT_2_OVER_PI * (u + GELU_C * u**3))
    return 0.5 * (1.0 + t) + 0.5 * u * (1.0 - t * t) * SQRT_2_OVER_PI * (1.0 + 3.0 * GELU_C * u * u)


def ref_scale_bias_gelu(x, scale=1.0, bias=0.0) -> np.ndarray:
    return ref_gelu(_gelu_u(f64(x), scale, bias))


def ref_scale_bias_gelu_mag(x, scale=1.0, bias=0.0) -> np.ndarray:
    """Magnitude of the terms of 0.5 * u * (1 + tanh(z)): 0.5 |u| (1 + |tanh z|). In the negative
    tail 1 + tanh(z) cancels, so float32 arithmetic is accurate relative to |u|, not to |gelu(u)|."""
    u = _gelu_u(f64(x), scale, bias)
    t = np.tanh(SQRT_2_OVER_PI * (u + GELU_C * u**3))
    return 0.5 * np.abs(u) * (1.0 + np.abs(t))


def ref_scale_bias_gelu_vjp_mag(x, scale, bias, g) -> np.ndarray:
    """Magnitude of the terms of dx = g * s * (0.5 (1 + t) + 0.5 u (1 - t^2) sqrt(2/pi) (1 + 3 c u^2))."""
    s = scale if isinstance(scale, (int, float)) else f64(scale)
    return np.abs(f64(g) * s) * _gelu_grad_mag(_gelu_u(f64(x), scale, bias))


def _gelu_grad_mag(u) -> np.ndarray:
    """Magnitude of the terms of gelu'(u) = 0.5 (1 + t) + 0.5 u (1 - t^2) sqrt(2/pi) (1 + 3 c u^2)."""
    with np.errstate(over="ignore", invalid="ignore"):
        t = np.tanh(SQRT_2_OVER_PI * (u + GELU_C * u**3))
        second = 0.5 * np.abs(u) * (1.0 - t * t) * SQRT_2_OVER_PI * (1.0 + 3.0 * GELU_C * u * u)
    return 0.5 * (1.0 + np.abs(t)) + np.where(np.isfinite(second), second, 0.0)


def ref_scale_bias_gelu_vjp(x, scale, bias, g):
    """Returns (dx, dscale, dbias); dscale/dbias are None for Python-number scale/bias."""
    x = f64(x)
    g = f64(g)
    c = x.shape[-1]
    gu = g * ref_gelu_grad(_gelu_u(x, scale, bias))
    s = scale if isinstance(scale, (int, float)) else f64(scale)
    dx = gu * s
    ds = None if isinstance(scale, (int, float)) else (_rows(gu * x).sum(0) if x.size else np.zeros(c))
    db = None if isinstance(bias, (int, float)) else (_rows(gu).sum(0) if x.size else np.zeros(c))
    return dx, ds, db


# float64 forward-mode tangents: (tangent, magnitude of its terms) for tangents t of x and ts / tb of
# scale / bias (None: not differentiated). Checked against central differences of the forward
# references above by test_forward_mode.py.


def ref_softmax_jvp(x, t, axis: int = -1):
    """y * (t - sum(t * y)): the VJP's formula with t for g (softmax's Jacobian is symmetric)."""
    return ref_softmax_vjp(x, t, axis), ref_softmax_vjp_mag(x, t, axis)


def _norm_jvp(x, scale, t, ts, tb, eps, rms):
    x, t = f64(x), f64(t)
    c = x.shape[-1]
    mean = 0.0 if rms else x.mean(axis=-1, keepdims=True)
    rstd = 1.0 / np.sqrt(((x - mean) ** 2).mean(axis=-1, keepdims=True) + eps)
    xhat = (x - mean) * rstd
    s = _param(scale, c)
    centered = t if rms else t - t.mean(axis=-1, keepdims=True)
    tan = s * rstd * (centered - xhat * (t * xhat).mean(axis=-1, keepdims=True))
    at, axh = np.abs(t), np.abs(xhat)
    spread = (0.0 if rms else at.mean(-1, keepdims=True)) + axh * (at * axh).mean(-1, keepdims=True)
    mag = np.abs(s) * rstd * (at + spread)
    if ts is not None:
        tan, mag = tan + xhat * f64(ts), mag + np.abs(xhat * f64(ts))
    if tb is not None:
        tan, mag = tan + f64(tb), mag + np.abs(f64(tb))
    return tan, mag


def ref_layer_norm_jvp(x, scale, t, ts=None, tb=None, eps: float = 1e-5):
    return _norm_jvp(x, scale, t, ts, tb, eps, rms=False)


def ref_rms_norm_jvp(x, scale, t, ts=None, eps: float = 1e-6):
    return _norm_jvp(x, scale, t, ts, None, eps, rms=True)


def ref_scale_bias_gelu_jvp(x, scale, bias, t, ts=None, tb=None):
    """gelu'(u) * (t * scale + x * ts + tb), u = x * scale + bias."""
    x, t = f64(x), f64(t)
    u = _gelu_u(x, scale, bias)
    s = scale if isinstance(scale, (int, float)) else f64(scale)
    du, dmag = t * s, np.abs(t * s)
    if ts is not None:
        du, dmag = du + x * f64(ts), dmag + np.abs(x * f64(ts))
    if tb is not None:
        du, dmag = du + f64(tb), dmag + np.abs(f64(tb))
    return ref_gelu_grad(u) * du, _gelu_grad_mag(u) * dmag


def norm_vjp(op, device, x, s, b, g, **kw):
    """(y, (dx, dscale[, dbias])) of one jitted VJP of jm.layer_norm (scale s, bias b) or jm.rms_norm (scale s; b
    unused) on `device`, for the cotangent g, with the op's keyword arguments kw (axis=, dtype=)."""
    import jax

    import jax_memops as jm

    put = [jax.device_put(a, device) for a in (x, s, b, g)]
    if op == "layer_norm":
        f = lambda x, s, b: jm.layer_norm(x, s, b, **kw)  # noqa: E731
        return jax.jit(lambda x, s, b, g: (lambda y, vjp: (y, vjp(g)))(*jax.vjp(f, x, s, b)))(*put)
    f = lambda x, s: jm.rms_norm(x, s, **kw)  # noqa: E731
    return jax.jit(lambda x, s, g: (lambda y, vjp: (y, vjp(g)))(*jax.vjp(f, x, s)))(put[0], put[1], put[3])


def ref_norm_axes(x, scale, bias, axes, eps, rms, g):
    """LayerNorm (rms: RMSNorm) over `axes` of x itself, parameters of x's sizes along them (None: absent), in float64:
    (y, dx, dscale, dbias, the magnitude of dx's terms) for the cotangent g."""
    x, g = f64(x), f64(g)
    shape = [x.shape[a] if a in axes else 1 for a in range(x.ndim)]
    bcast = lambda p: 1.0 if p is None else f64(p).reshape(shape)  # noqa: E731
    rest = tuple(a for a in range(x.ndim) if a not in axes)
    mean = 0.0 if rms else x.mean(axis=axes, keepdims=True)
    rstd = 1.0 / np.sqrt(((x - mean) ** 2).mean(axis=axes, keepdims=True) + eps)
    xhat = (x - mean) * rstd
    y = xhat * bcast(scale) + (0.0 if bias is None else bcast(bias))
    gh = g * bcast(scale)
    dx = rstd * (gh - (0.0 if rms else gh.mean(axis=axes, keepdims=True))
                 - xhat * (gh * xhat).mean(axis=axes, keepdims=True))
    mag = rstd * (np.abs(gh) + (0.0 if rms else np.abs(gh).mean(axis=axes, keepdims=True))
                  + np.abs(xhat) * np.abs(gh * xhat).mean(axis=axes, keepdims=True))
    return y, dx, (g * xhat).sum(axis=rest), g.sum(axis=rest), mag


def as_rows(a, axis) -> np.ndarray:
    """a (as float64) with the entries of `axis` (an int, a sequence, or None for all) moved last and flattened: one
    row per row of an op over those axes, for assert_close's per-row bounds."""
    axes = range(np.ndim(a)) if axis is None else [int(x) % np.ndim(a) for x in np.atleast_1d(axis)]
    moved = np.moveaxis(f64(a), list(axes), list(range(-len(axes), 0)))
    return moved.reshape(*moved.shape[: moved.ndim - len(axes)], -1)


def special_rows(rng, c, dtype):
    """One row per rule of the semantics (as jax.nn.softmax):
    0 plain; 1 about 40% -inf (masking); 2 all -inf (NaN row); 3 one NaN (NaN row); 4 one +inf (NaN
    row); 5 logits of magnitude ~1e4; 6 -inf on the first half (online kernels: running max -inf at the
    start); 7 -inf on the second half; 8 -inf except the last entry (one-hot at C - 1, where v7 clamps);
    9 -inf at columns with c % 32 < 16 (online_warp: half the lanes hold only -inf partials, merged with
    each other and then with finite ones)."""
    x = randn(rng, (10, c), np.float32, scale=3.0)
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


# ----------------------------------------------------------------------------------------------
# comparisons
# ----------------------------------------------------------------------------------------------


def rel_err(out, ref) -> float:
    out = f64(out)
    ref = f64(ref)
    num = float(np.linalg.norm((out - ref).ravel()))
    den = float(np.linalg.norm(ref.ravel()))
    return num / den if den > 0 else num


def assert_close(out, ref, tol: float, *, dtype=None, what: str = "output", row_factor: float = 4.0, mag=None):
    """Checks `out` against the float64 reference `ref`.

    * same shape; identical NaN pattern; identical +-inf entries;
    * on the finite entries: ||out - ref|| <= tol * ||ref|| + 2 * ||round(ref) - ref|| (+ tiny atol), where
      round(ref) is ref rounded to `dtype` (the error even an exact kernel makes when writing `dtype`);
    * per row (last axis): max|out - ref| <= row_factor * tol * max|ref_row| + 2 * max|round(ref)-ref|.

    `mag` (optional, same shape as ref): the magnitude of the terms whose sum is ref (for results
    computed with cancellation, e.g. softmax's y * (g - sum(g * y))); the bounds then use
    max(||ref||, ||mag||) and max(|ref_row|, |mag_row|) instead of ||ref|| and |ref_row|.
    """
    out = f64(out)
    ref = f64(ref)
    assert out.shape == ref.shape, f"{what}: shape {out.shape} != expected {ref.shape}"
    if out.size == 0:
        return
    nan_out, nan_ref = np.isnan(out), np.isnan(ref)
    if (nan_out != nan_ref).any():
        bad = np.argwhere(nan_out != nan_ref)
        raise AssertionError(
            f"{what}: NaN pattern differs ({int(nan_out.sum())} NaN in output, {int(nan_ref.sum())} expected);"
            f" first mismatching indices {bad[:5].tolist()}"
        )
    inf_ref = np.isinf(ref)
    inf_out = np.isinf(out)
    if (inf_out != inf_ref).any() or (out[inf_ref] != ref[inf_ref]).any():
        bad = np.argwhere((inf_out != inf_ref))
        raise AssertionError(f"{what}: inf pattern differs; first mismatching indices {bad[:5].tolist()}")

    fin = np.isfinite(ref)
    o = np.where(fin, out, 0.0)
    r = np.where(fin, ref, 0.0)
    dt = np.dtype(dtype) if dtype is not None else F64
    with np.errstate(over="ignore"):
        rounding = np.abs(round_to(r, dt) - r) if dt != F64 else np.zeros_like(r)
    rounding = np.where(np.isfinite(rounding), rounding, 0.0)
    diff = np.abs(o - r)
    n = r.size
    atol = tol * 1e-6 * math.sqrt(n) * max(1.0, float(np.max(np.abs(r))))
    err = float(np.linalg.norm(diff.ravel()))
    den = float(np.linalg.norm(r.ravel()))
    m = None
    if mag is not None:
        m = np.abs(np.where(fin, f64(mag), 0.0))
        assert m.shape == r.shape
    scale = max(den, float(np.linalg.norm(m.ravel()))) if m is not None else den
    bound = tol * scale + 2.0 * float(np.linalg.norm(rounding.ravel())) + atol
    if not err <= bound:
        i = np.unravel_index(int(np.argmax(diff)), diff.shape)
        raise AssertionError(
            f"{what}: relative error {err / den if den else err:.3e} > tol {tol:.1e} "
            f"(bound {bound:.3e} abs); max abs error {diff[i]:.3e} at {tuple(int(k) for k in i)}: "
            f"got {o[i]!r}, expected {r[i]!r}"
        )
    if r.ndim >= 1 and r.shape[-1] > 0:
        d2 = diff.reshape(-1, r.shape[-1])
        r2 = np.abs(r).reshape(-1, r.shape[-1])
        q2 = rounding.reshape(-1, r.shape[-1])
        if m is not None:
            r2 = np.maximum(r2, m.reshape(-1, r.shape[-1]))
        row_bound = row_factor * tol * r2.max(axis=1) + 2.0 * q2.max(axis=1) + atol
        row_err = d2.max(axis=1)
        bad = np.nonzero(~(row_err <= row_bound))[0]
        if bad.size:
            k = int(bad[0])
            j = int(np.argmax(d2[k]))
            raise AssertionError(
                f"{what}: row {k} (of {d2.shape[0]} rows, flattened) max abs error {row_err[k]:.3e} > "
                f"{row_bound[k]:.3e} (row max |ref| or |mag| {r2[k].max():.3e}); at column {j}: got "
                f"{o.reshape(d2.shape)[k, j]!r}, expected {r.reshape(d2.shape)[k, j]!r}; {bad.size} bad rows"
            )


def assert_finite(a, what: str = "output"):
    a = f64(a)
    if not np.all(np.isfinite(a)):
        bad = np.argwhere(~np.isfinite(a))
        raise AssertionError(f"{what}: {bad.shape[0]} non-finite entries, first at {bad[:5].tolist()}")


def assert_bitwise_equal(a, b, what: str = "output"):
    a = np.asarray(a)
    b = np.asarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape, f"{what}: {a.dtype}{a.shape} vs {b.dtype}{b.shape}"
    ua = a.view(np.uint8)
    ub = b.view(np.uint8)
    if not np.array_equal(ua, ub):
        diff = np.argwhere(f64(a) != f64(b))
        raise AssertionError(f"{what}: not bitwise identical across runs; {diff.shape[0]} entries differ, first {diff[:5].tolist()}")


# ----------------------------------------------------------------------------------------------
# pure-jnp formulations ("XLA's own formulation"), for gradient and second-order cross-checks.
# ----------------------------------------------------------------------------------------------


def jnp_softmax(x, axis=-1):
    import jax

    return jax.nn.softmax(x, axis=axis)


def jnp_layer_norm(x, scale=None, bias=None, eps=1e-5):
    import jax.numpy as jnp

    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
    y = (x - mean) * (1.0 / jnp.sqrt(var + eps))
    if scale is not None:
        y = y * scale
    if bias is not None:
        y = y + bias
    return y


def jnp_rms_norm(x, scale=None, eps=1e-6):
    import jax.numpy as jnp

    y = x * (1.0 / jnp.sqrt(jnp.mean(jnp.square(x), axis=-1, keepdims=True) + eps))
    if scale is not None:
        y = y * scale
    return y


def jnp_scale_bias_gelu(x, scale=1.0, bias=0.0):
    import jax.numpy as jnp

    u = x * scale + bias
    return 0.5 * u * (1.0 + jnp.tanh(SQRT_2_OVER_PI * (u + GELU_C * u * u * u)))


# The odd shapes every op is checked on: C = 1, primes, 50257, > 4096, N = 1, ranks 1 to 4.
SHAPES = [
    (4, 1),
    (5, 3),
    (7, 31),
    (3, 33),
    (1, 1000),
    (6, 1000),
    (2, 4097),
    (3, 50257),
    (17,),
    (2, 3, 33),
    (2, 2, 3, 31),
]
SHAPE_IDS = ["x".join(map(str, s)) for s in SHAPES]


# ----------------------------------------------------------------------------------------------
# poisoned memory, fresh processes
# ----------------------------------------------------------------------------------------------


def poison(device, shape) -> None:
    """Fills a float32 buffer of `shape` on `device` with NaN and frees it: the next outputs of that size
    take its memory, so an element a kernel leaves unwritten stays NaN."""
    import jax

    p = jax.device_put(np.full(shape, np.nan, np.float32), device)
    p.block_until_ready()
    p.delete()


def nvcc_build(source: str, output: str, *flags: str, timeout: int = 900) -> subprocess.CompletedProcess:
    """nvcc over a CUDA source of the tests or benchmarks against the package's headers (cpp/) and jaxlib's FFI
    headers, C++17 (the test skips where nvcc is not on the PATH); `flags` choose what it makes (e.g. "-c", or the
    targets). Returns the finished process (the caller checks its status and shows its output)."""
    import shutil

    import jax.ffi
    import pytest

    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("needs nvcc (the CUDA toolkit)")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return subprocess.run([nvcc, "-std=c++17", "-O1", f"-I{jax.ffi.include_dir()}", f"-I{os.path.join(root, 'cpp')}",
                           *flags, source, "-o", output], capture_output=True, text=True, timeout=timeout)


# The environment variable naming the persistent compilation cache that run_script(compile_cache=True) shares among the
# scripts of one test run (conftest.py sets it in the controlling process, which the xdist workers inherit).
COMPILE_CACHE_ENV = "JAX_MEMOPS_TEST_COMPILE_CACHE"


def run_script(script: str, timeout: int = 900, *, env: dict, compile_cache: bool = False, **fmt) -> str:
    """Runs `script`, formatted with tests= (this folder) and **fmt, in a fresh interpreter under the
    environment variables `env` (the kernels read their A/B switches once per process) and without JAX's
    GPU preallocation (this process may already hold 75% of the GPU); asserts that it printed OK last
    and returns its stderr.

    compile_cache: the script's jitted programs go through a persistent compilation cache shared by the test run,
    and the first run of a script text compiles alone (a file lock) while its other runs wait, then load what it
    compiled. For the version tests, which run one script under each of many A/B switches: the switches are read by
    the handlers at run time, so the compiled programs are the same in every process (a script compiles hundreds).
    Measured on the H200 (12 workers, RESULTS.md "The GPU suite and the whole bench at HEAD"): the norm forward
    script's first run 128 s, its runs from the cache 35-60 s beside the same load. Processes sharing one GPU are
    time-sliced, so these tests still slow each other down: four cached runs side by side took ~120 s each where the
    first, alone, took 72 s (the norm backward script)."""
    tests = os.path.dirname(os.path.abspath(__file__))
    text = script.format(tests=tests, **fmt)
    env = dict(os.environ, XLA_PYTHON_CLIENT_PREALLOCATE="false", **env)

    def run() -> str:
        out = subprocess.run([sys.executable, "-c", text], env=env, cwd="/", capture_output=True, text=True,
                             timeout=timeout)
        assert out.returncode == 0 and out.stdout.strip().endswith("OK"), out.stdout[-2000:] + out.stderr[-4000:]
        return out.stderr

    root = os.environ.get(COMPILE_CACHE_ENV)
    if not compile_cache or not root:
        return run()
    import fcntl
    import hashlib

    env.update(JAX_COMPILATION_CACHE_DIR=os.path.join(root, "jax"), JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
               JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="-1")
    key = hashlib.sha1(text.encode()).hexdigest()[:16]
    warm = os.path.join(root, key + ".warm")  # exists once a run of this text has filled the cache
    with open(os.path.join(root, key + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also when run() fails
        first = not os.path.exists(warm)
        if not first:  # the cache is filled: the other runs of this text go side by side
            fcntl.flock(lock, fcntl.LOCK_UN)
        err = run()
        if first:
            open(warm, "w").close()
        return err
