"""Fused scale -> bias -> GELU (tanh form) as one custom call; the backward recomputes from x (reverse mode:
the transpose of the op's tangent map)."""

from __future__ import annotations

import functools
import numbers

import jax
import jax.numpy as jnp
from jax.custom_derivatives import SymbolicZero
from jax.interpreters import ad

from . import reference
from ._primitive import (GRAD, PARAM, ROW, FfiPrimitive, JvpPrimitive, LinearPrimitive, Spec, absent, cotangents,
                         np_attr, partials_workspace, row_param, wants_grad)
from ._sharding import match_varying
from ._validate import check_input, check_param

f32 = jnp.float32
_AFFINE = {"scale_value": np_attr("f32"), "bias_value": np_attr("f32")}
_GELU_TWO_K, _GELU_CUBIC, _GELU_U_MAX = 1.5957691216057308, 0.044715, 1.0e4  # 2 sqrt(2/pi); as cpp/gelu_math.h


def _param(p, value, x):
    """A parameter as it multiplies or adds to x: the array ((C,) or grouped), or the static value when absent."""
    return row_param(p, x) if p.size else value


def _u(x, scale, bias, scale_value, bias_value):
    return x.astype(f32) * _param(scale, scale_value, x) + _param(bias, bias_value, x)


def _gelu_grad(u):
    """gelu'(u) in the kernels' sigmoid form (cpp/gelu_math.h), for the jax.numpy tangent map and backward (batched
    tangents, linearize, derivatives of the backward): sigmoid(z) + u z' sigmoid(z) sigmoid(-z), z = 2k (u + 0.044715
    u^3). No term cancels. Autodiff of the tanh form does cancel (u (1 - tanh^2) z' with tanh rounded near +-1): XLA's
    jitted float32 jvp of jax.nn.gelu reads ~2e-4 at u = -40 and -2e6 at u = -1e5 on the CPU (batched tangents),
    where this reads 0. Past |u| = 1e4, where u z' overflows, 1 or 0 as in the kernels; u is clipped there so that
    the higher derivatives are 0, not NaN."""
    uc = jnp.clip(u, -_GELU_U_MAX, _GELU_U_MAX)
    w = uc * uc
    z = _GELU_TWO_K * uc * (1 + _GELU_CUBIC * w)
    dz = _GELU_TWO_K * (1 + 3 * _GELU_CUBIC * w)
    s, s_neg = jax.nn.sigmoid(z), jax.nn.sigmoid(-z)
    return jnp.where(jnp.abs(u) > _GELU_U_MAX, (u > 0).astype(u.dtype), s + uc * dz * s * s_neg)


def _fwd_ref(x, scale, bias, scale_value, bias_value):
    return (reference.gelu(_u(x, scale, bias, scale_value, bias_value)).astype(x.dtype),)


def _bwd_ref(x, scale, bias, dy, scale_value, bias_value, grad_dims):
    g = _gelu_grad(_u(x, scale, bias, scale_value, bias_value)) * dy.astype(f32)
    rows = tuple(range(x.ndim - 1))
    dx = (g * _param(scale, scale_value, x)).astype(x.dtype)
    sums = (jnp.sum(g * x.astype(f32), axis=rows), jnp.sum(g, axis=rows))
    return (dx, *(absent() if k is None else s for s, k in zip(sums, grad_dims)))


# Elementwise along the last axis: on a mesh that splits it, each device runs the kernel on its columns.
_fwd = FfiPrimitive(Spec("gelu_fwd", (ROW, PARAM, PARAM), (ROW,), _AFFINE), _fwd_ref, columns="local")
_bwd = FfiPrimitive(Spec("gelu_bwd", (ROW, PARAM, PARAM, ROW), (ROW, GRAD, GRAD), _AFFINE, partials_workspace),
                    _bwd_ref,
                    columns="local")


def _tangent(x, scale, bias, tx, tscale, tbias, *, scale_value, bias_value):
    """gelu'(u) * du with du = tx * scale + x * tscale + tbias; parameters (C,), grouped, or absent."""
    du = tx.astype(f32) * _param(scale, scale_value, x)
    if tscale.size:
        du = du + x.astype(f32) * row_param(tscale, x)
    if tbias.size:
        du = du + row_param(tbias, x)
    return (_gelu_grad(_u(x, scale, bias, scale_value, bias_value)) * du).astype(x.dtype)


def _tangent_transpose(ct, x, scale, bias, tx, tscale, tbias, *, scale_value, bias_value):
    args = (x, scale, bias, tx, tscale, tbias)
    if type(ct) is ad.Zero:
        return [None] * len(args)
    dx, dscale, dbias = _bwd.call(x, scale, bias, ct, scale_value=scale_value, bias_value=bias_value,
                                  grad_dims=(wants_grad(tscale), wants_grad(tbias)))
    return cotangents(args, {3: dx, 4: dscale, 5: dbias})


_tan = LinearPrimitive("gelu_tangent", (ROW, PARAM, PARAM, ROW, PARAM, PARAM), _tangent, _tangent_transpose)


def _jvp_ref(x, scale, bias, tx, tscale, tbias, *, scale_value, bias_value):
    affine = {"scale_value": scale_value, "bias_value": bias_value}
    return _fwd_ref(x, scale, bias, **affine)[0], _tangent(x, scale, bias, tx, tscale, tbias, **affine)


def _jvp_split(x, scale, bias, tx, tscale, tbias, *, scale_value, bias_value):
    affine = {"scale_value": scale_value, "bias_value": bias_value}
    return _fwd.call(x, scale, bias, **affine)[0], _tan.bind(x, scale, bias, tx, tscale, tbias, **affine)


# Forward mode's one pass: y and its tangent from x and tx (the split, where reverse mode partially evaluates it).
_jvp = JvpPrimitive(Spec("gelu_jvp", (ROW, PARAM, PARAM, ROW, PARAM, PARAM), (ROW, ROW), _AFFINE), _jvp_ref,
                    _jvp_split, columns="local")


@functools.partial(jax.custom_jvp, nondiff_argnums=(3, 4))
def _scale_bias_gelu(x, scale, bias, scale_value, bias_value):
    return _fwd.call(x, scale, bias, scale_value=scale_value, bias_value=bias_value)[0]


def _scale_bias_gelu_jvp(scale_value, bias_value, primals, tangents):
    """A parameter held fixed (a Python number, or an array closed over) has a symbolic zero tangent: it goes to
    the kernel absent, so the term x * tscale is never formed (at x = +-inf that is NaN, where the tangent is
    gelu'(u) * tx * scale, as the backward has it) and no zeros are read."""
    x = primals[0]
    tx, tscale, tbias = tangents
    if isinstance(tx, SymbolicZero):
        tx = ad.instantiate_zeros(ad.Zero(tx.aval))
    tscale, tbias = (match_varying(x, absent())[1] if isinstance(t, SymbolicZero) else t for t in (tscale, tbias))
    return _jvp.bind(*primals, tx, tscale, tbias, scale_value=scale_value, bias_value=bias_value)


_scale_bias_gelu.defjvp(_scale_bias_gelu_jvp, symbolic_zeros=True)


def _split(p, cols, name):
    """A Python number -> (static value, None: absent); an array of shape (C,) or a scalar array -> (unused, the
    array)."""
    if isinstance(p, numbers.Real) and not isinstance(p, bool):
        return float(p), None
    if isinstance(p, (bool, str, bytes)) or p is None:
        raise TypeError(f"scale_bias_gelu: {name} must be a Python number, a scalar array or an array of shape "
                        f"({cols},), got {p!r}")
    return (1.0 if name == "scale" else 0.0), check_param(p, cols, "scale_bias_gelu", name, scalar_ok=True)


def scale_bias_gelu(x, scale=1.0, bias=0.0):
    """gelu_tanh(x * scale + bias) in one pass over x.

    scale, bias: each a Python number (static, not differentiated), or an array of shape (C,) = the last
    axis of x or of shape () (a scalar for every column) (arrays are differentiable; any float dtype).
    x: float32, bfloat16 or float16; math in float32.
    """
    x = check_input(x, "scale_bias_gelu")
    cols = x.shape[-1]
    scale_value, scale_arr = _split(scale, cols, "scale")
    bias_value, bias_arr = _split(bias, cols, "bias")
    if x.size == 0:
        return reference.scale_bias_gelu(x, scale, bias)
    return _scale_bias_gelu_checked(x, scale_arr, bias_arr, scale_value=scale_value, bias_value=bias_value)


# Jitted once the arguments are checked: an eager call then takes jit's cached fast path instead of custom_jvp's
# and the primitive's own dispatch (softmax.py); under an outer jit it is inlined.
@functools.partial(jax.jit, static_argnames=("scale_value", "bias_value"))
def _scale_bias_gelu_checked(x, scale, bias, *, scale_value, bias_value):
    # A scalar array (a traced or learned scalar) is broadcast over the columns after its cast to float32, so that
    # its gradient is their sum in float32.
    scale, bias = (absent() if p is None else jnp.broadcast_to(p.astype(f32), x.shape[-1:]) for p in (scale, bias))
    return _scale_bias_gelu(*match_varying(x, scale, bias), scale_value, bias_value)
