"""LayerNorm and RMSNorm as custom calls over rows (the last axis, or several axes flattened into one); backward
from saved float32 mean/rstd (reverse mode: the transpose of each op's tangent map)."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.interpreters import ad

from . import reference
from ._primitive import (GRAD, PARAM, ROW, STAT, FfiPrimitive, JvpPrimitive, LinearPrimitive, Spec, absent, cotangents,
                         dtype_or, np_attr, norm_partials_workspace, over_rows, row_param, to_f32_param, wants_grad)
from ._sharding import match_varying
from ._validate import check_epsilon, check_input, check_norm_axes, check_out_dtype, check_param

f32 = jnp.float32
_EPS = {"epsilon": np_attr("f32")}


# -- pure-jnp references with the primitives' signatures (tangents for higher-order AD) --------------
def _pivot(x32, rms):
    """The kernels take LayerNorm statistics of x - x[..., :1] (exact for nearby values, so a large mean
    with a tiny variance stays accurate); the saved mean is that of the shifted row. Taken as a masked
    sum (exact: one term is nonzero), not a slice: a slice of a last dim that a mesh splits over explicit
    axes is refused at trace time, a reduction over it is not. Without a derivative: xhat does not depend
    on the pivot (it cancels between x and the saved mean), so stop_gradient is exact, and derivatives of
    these references (second order) carry no large cancelling terms through x[..., 0], which a 16-bit x
    would round at each use (bf16: errors of ~C * eps there)."""
    if rms:
        return 0.0
    first = jax.lax.broadcasted_iota(jnp.int32, x32.shape, x32.ndim - 1) == 0
    return jax.lax.stop_gradient(jnp.sum(jnp.where(first, x32, 0.0), axis=-1, keepdims=True))


def _xhat(x32, mean, rstd, rms):
    """xhat from x (float32) and the kernels' saved statistics (the mean of the pivoted row)."""
    return (x32 - _pivot(x32, rms) - (0.0 if rms else mean[..., None])) * rstd[..., None]


def _stats(x, epsilon, rms=False):
    """(xhat, shifted mean, rstd) in float32, as the kernels compute them."""
    d = x.astype(f32) - _pivot(x.astype(f32), rms)
    mean = jnp.zeros(x.shape[:-1], f32) if rms else jnp.mean(d, axis=-1)
    centered = d - mean[..., None]
    rstd = jax.lax.rsqrt(jnp.mean(jnp.square(centered), axis=-1) + epsilon)
    return centered * rstd[..., None], mean, rstd


def _affine(xhat, scale, bias=None):
    y = xhat * (scale if scale.size else 1.0)
    return y + (bias if bias is not None and bias.size else 0.0)


def _ln_fwd_ref(x, scale, bias, epsilon, y_dtype=None):
    xhat, mean, rstd = _stats(x, epsilon)
    return _affine(xhat, scale, bias).astype(dtype_or(y_dtype, x.dtype)), mean, rstd


def _rms_fwd_ref(x, scale, epsilon, y_dtype=None):
    xhat, _, rstd = _stats(x, epsilon, rms=True)
    return _affine(xhat, scale).astype(dtype_or(y_dtype, x.dtype)), rstd


def _norm_bwd_ref(x, scale, mean, rstd, dy, grad_dims, rms):
    x32, dy32 = x.astype(f32), dy.astype(f32)
    xhat = _xhat(x32, mean, rstd, rms)
    g = dy32 * (scale if scale.size else 1.0)
    mgx = jnp.mean(g * xhat, axis=-1, keepdims=True)
    mg = 0.0 if rms else jnp.mean(g, axis=-1, keepdims=True)
    dx = (rstd[..., None] * (g - mg - xhat * mgx)).astype(x.dtype)
    rows = tuple(range(x.ndim - 1))
    sums = [jnp.sum(dy32 * xhat, axis=rows), jnp.sum(dy32, axis=rows)]
    grads = [absent() if k is None else s for s, k in zip(sums, grad_dims)]
    return (dx, *grads)


_ln_fwd = FfiPrimitive(
    Spec("layer_norm_fwd", (ROW, PARAM, PARAM), (ROW, STAT, STAT), _EPS), _ln_fwd_ref)
_ln_bwd = FfiPrimitive(
    Spec("layer_norm_bwd", (ROW, PARAM, STAT, STAT, ROW), (ROW, GRAD, GRAD), {}, norm_partials_workspace),
    lambda x, scale, mean, rstd, dy, grad_dims: _norm_bwd_ref(x, scale, mean, rstd, dy, grad_dims, False))
_rms_fwd = FfiPrimitive(Spec("rms_norm_fwd", (ROW, PARAM), (ROW, STAT), _EPS), _rms_fwd_ref)
_rms_bwd = FfiPrimitive(
    Spec("rms_norm_bwd", (ROW, PARAM, STAT, ROW), (ROW, GRAD), {}, norm_partials_workspace),
    lambda x, scale, rstd, dy, grad_dims: _norm_bwd_ref(x, scale, None, rstd, dy, grad_dims, True))


# -- tangent maps (forward mode), transposed into the backward kernels (reverse mode) -----------------
def _norm_tangent(x, scale, mean, rstd, tx, tscale, tbias=None, *, rms, y_dtype=None):
    """d(xhat * scale + bias) for tangents tx, tscale, tbias: scale * rstd * (tx - mean(tx) - xhat *
    mean(tx * xhat)) + xhat * tscale + tbias (RMSNorm: no mean(tx)); parameters (C,) or grouped; in y's dtype."""
    x32 = x.astype(f32)
    xhat = _xhat(x32, mean, rstd, rms)
    t = tx.astype(f32)
    centered = t if rms else t - jnp.mean(t, axis=-1, keepdims=True)
    ty = rstd[..., None] * (centered - xhat * jnp.mean(t * xhat, axis=-1, keepdims=True))
    ty = ty * (row_param(scale, x) if scale.size else 1.0)
    if tscale.size:
        ty = ty + xhat * row_param(tscale, x)
    if tbias is not None and tbias.size:
        ty = ty + row_param(tbias, x)
    return ty.astype(dtype_or(y_dtype, x.dtype))


# The cotangent ct has y's dtype, the backward kernels' dy; dx comes back in x's.
def _ln_tangent_transpose(ct, x, scale, mean, rstd, tx, tscale, tbias, y_dtype=None):
    args = (x, scale, mean, rstd, tx, tscale, tbias)
    if type(ct) is ad.Zero:
        return [None] * len(args)
    dx, dscale, dbias = _ln_bwd.call(x, scale, mean, rstd, ct, grad_dims=(wants_grad(tscale), wants_grad(tbias)))
    return cotangents(args, {4: dx, 5: dscale, 6: dbias})


def _rms_tangent_transpose(ct, x, scale, rstd, tx, tscale, y_dtype=None):
    args = (x, scale, rstd, tx, tscale)
    if type(ct) is ad.Zero:
        return [None] * len(args)
    dx, dscale = _rms_bwd.call(x, scale, rstd, ct, grad_dims=(wants_grad(tscale),))
    return cotangents(args, {3: dx, 4: dscale})


_ln_tangent = LinearPrimitive(
    "layer_norm_tangent", (ROW, PARAM, STAT, STAT, ROW, PARAM, PARAM),
    functools.partial(_norm_tangent, rms=False), _ln_tangent_transpose)
_rms_tangent = LinearPrimitive(
    "rms_norm_tangent", (ROW, PARAM, STAT, ROW, PARAM),
    lambda x, scale, rstd, tx, tscale, y_dtype=None: _norm_tangent(x, scale, None, rstd, tx, tscale, rms=True,
                                                                   y_dtype=y_dtype),
    _rms_tangent_transpose)


# -- forward mode: y and its tangent in one call ----------------------------------------------------------------
def _ln_jvp_ref(x, scale, bias, tx, tscale, tbias, epsilon, y_dtype=None):
    y, mean, rstd = _ln_fwd_ref(x, scale, bias, epsilon, y_dtype)
    return y, _norm_tangent(x, scale, mean, rstd, tx, tscale, tbias, rms=False, y_dtype=y_dtype)


def _rms_jvp_ref(x, scale, tx, tscale, epsilon, y_dtype=None):
    y, rstd = _rms_fwd_ref(x, scale, epsilon, y_dtype)
    return y, _norm_tangent(x, scale, None, rstd, tx, tscale, rms=True, y_dtype=y_dtype)


def _ln_jvp_split(x, scale, bias, tx, tscale, tbias, epsilon, y_dtype=None):
    y, mean, rstd = _ln_fwd.call(x, scale, bias, epsilon=epsilon, **_y(y_dtype))
    return y, _ln_tangent.bind(x, scale, mean, rstd, tx, tscale, tbias, **_y(y_dtype))


def _rms_jvp_split(x, scale, tx, tscale, epsilon, y_dtype=None):
    y, rstd = _rms_fwd.call(x, scale, epsilon=epsilon, **_y(y_dtype))
    return y, _rms_tangent.bind(x, scale, rstd, tx, tscale, **_y(y_dtype))


_ln_jvp = JvpPrimitive(Spec("layer_norm_jvp", (ROW, PARAM, PARAM, ROW, PARAM, PARAM), (ROW, ROW), _EPS), _ln_jvp_ref,
                       _ln_jvp_split)
_rms_jvp = JvpPrimitive(Spec("rms_norm_jvp", (ROW, PARAM, ROW, PARAM), (ROW, ROW), _EPS), _rms_jvp_ref,
                        _rms_jvp_split)


# -- the ops: scale/bias arrive as float32 (C,) or the (0,) placeholder ------------------------------
# y_dtype: None (y in x's dtype) or another dtype, a primitive param only where it differs from x's, so that a
# same-dtype call is the same program as before the param existed.
def _y(y_dtype):
    return {} if y_dtype is None else {"y_dtype": y_dtype}


@functools.partial(jax.custom_jvp, nondiff_argnums=(3, 4))
def _layer_norm(x, scale, bias, epsilon, y_dtype):
    return _ln_fwd.call(x, scale, bias, epsilon=epsilon, **_y(y_dtype))[0]


@_layer_norm.defjvp
def _layer_norm_jvp(epsilon, y_dtype, primals, tangents):
    return _ln_jvp.bind(*primals, *tangents, epsilon=epsilon, **_y(y_dtype))


@functools.partial(jax.custom_jvp, nondiff_argnums=(2, 3))
def _rms_norm(x, scale, epsilon, y_dtype):
    return _rms_fwd.call(x, scale, epsilon=epsilon, **_y(y_dtype))[0]


@_rms_norm.defjvp
def _rms_norm_jvp(epsilon, y_dtype, primals, tangents):
    return _rms_jvp.bind(*primals, *tangents, epsilon=epsilon, **_y(y_dtype))


def layer_norm(x, scale=None, bias=None, *, epsilon=1e-5, axis=-1, dtype=None):
    """LayerNorm: (x - mean) / sqrt(var + epsilon) * scale + bias, the statistics over `axis`.

    x: float32, bfloat16 or float16, rank >= 1; statistics in float32 (biased variance). dtype: the output's,
    x.dtype by default, or another of the three: the kernels read x as it is and round y once into dtype (a
    bfloat16 x with dtype=float32 costs no conversion pass; x's gradient comes back in x.dtype). axis: the last
    axis by default; an int, a tuple of ints (their entries form one row, as in `jnp.mean(x, axis)`; torch's
    `normalized_shape` is the trailing ones) or None (all of x). Axes other than the trailing ones cost two
    transposes. scale, bias: optional arrays of x's sizes along `axis`, in x's order ((C,) by default), any
    float dtype (gradients in their dtype).
    """
    x = check_input(x, "layer_norm")
    axes, shape, matches = check_norm_axes(axis, x, "layer_norm")
    scale = check_param(scale, shape, "layer_norm", "scale", matches=matches)
    bias = check_param(bias, shape, "layer_norm", "bias", matches=matches)
    return _layer_norm_checked(x, scale, bias, epsilon=check_epsilon(epsilon, "layer_norm"), axes=axes,
                               y_dtype=check_out_dtype(dtype, x, "layer_norm"))


def rms_norm(x, scale=None, *, epsilon=1e-6, axis=-1, dtype=None):
    """RMSNorm: x / sqrt(mean(x^2) + epsilon) * scale over `axis`. Same dtype and axis rules as layer_norm."""
    x = check_input(x, "rms_norm")
    axes, shape, matches = check_norm_axes(axis, x, "rms_norm")
    scale = check_param(scale, shape, "rms_norm", "scale", matches=matches)
    return _rms_norm_checked(x, scale, epsilon=check_epsilon(epsilon, "rms_norm"), axes=axes,
                             y_dtype=check_out_dtype(dtype, x, "rms_norm"))


def _flat(p):
    """A parameter of the normalized axes' shape as the (C,) row the kernels read (C: their sizes' product)."""
    return p if p is None or p.ndim == 1 else p.reshape(-1)


# Jitted once the arguments are checked: an eager call then takes jit's cached fast path instead of custom_jvp's
# and the primitive's own dispatch (softmax.py); under an outer jit they are inlined. Rows made of several axes
# are flattened into one (over_rows); their parameters likewise, and their gradients reshaped back by autodiff.
@functools.partial(jax.jit, static_argnames=("epsilon", "axes", "y_dtype"))
def _layer_norm_checked(x, scale, bias, *, epsilon, axes, y_dtype):
    scale, bias = _flat(scale), _flat(bias)
    if x.size == 0:
        y_dtype = dtype_or(y_dtype, x.dtype)
        return over_rows(lambda rows: reference.layer_norm(rows, scale, bias, epsilon).astype(y_dtype), x, axes)
    scale, bias = to_f32_param(scale), to_f32_param(bias)
    return over_rows(lambda rows: _layer_norm(*match_varying(rows, scale, bias), epsilon, y_dtype), x, axes)


@functools.partial(jax.jit, static_argnames=("epsilon", "axes", "y_dtype"))
def _rms_norm_checked(x, scale, *, epsilon, axes, y_dtype):
    scale = _flat(scale)
    if x.size == 0:
        y_dtype = dtype_or(y_dtype, x.dtype)
        return over_rows(lambda rows: reference.rms_norm(rows, scale, epsilon).astype(y_dtype), x, axes)
    scale = to_f32_param(scale)
    return over_rows(lambda rows: _rms_norm(*match_varying(rows, scale), epsilon, y_dtype), x, axes)
