"""Fused scale -> bias -> GELU (tanh form) as one custom call; the backward recomputes from x."""

from __future__ import annotations

import functools
import numbers

import jax
import jax.numpy as jnp

from . import reference
from ._primitive import GRAD, PARAM, ROW, FfiPrimitive, Spec, absent, grad_dim, np_attr, partials_workspace
from ._sharding import match_varying
from ._validate import check_input, check_param

f32 = jnp.float32
_AFFINE = {"scale_value": np_attr("f32"), "bias_value": np_attr("f32")}


def _u(x, scale, bias, scale_value, bias_value):
    s = scale if scale.size else scale_value
    b = bias if bias.size else bias_value
    return x.astype(f32) * s + b


def _fwd_ref(x, scale, bias, scale_value, bias_value):
    return (reference.gelu(_u(x, scale, bias, scale_value, bias_value)).astype(x.dtype),)


def _bwd_ref(x, scale, bias, dy, scale_value, bias_value, grad_dims):
    u = _u(x, scale, bias, scale_value, bias_value)
    _, vjp = jax.vjp(reference.gelu, u)
    (g,) = vjp(dy.astype(f32))
    rows = tuple(range(x.ndim - 1))
    dx = (g * (scale if scale.size else scale_value)).astype(x.dtype)
    sums = (jnp.sum(g * x.astype(f32), axis=rows), jnp.sum(g, axis=rows))
    return (dx, *(absent() if k is None else s for s, k in zip(sums, grad_dims)))


# Elementwise along the last axis: on a mesh that splits it, each device runs the kernel on its columns.
_fwd = FfiPrimitive(Spec("gelu_fwd", (ROW, PARAM, PARAM), (ROW,), _AFFINE), _fwd_ref, columns="local")
_bwd = FfiPrimitive(Spec("gelu_bwd", (ROW, PARAM, PARAM, ROW), (ROW, GRAD, GRAD), _AFFINE, partials_workspace),
                    _bwd_ref,
                    columns="local")


@functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4))
def _scale_bias_gelu(x, scale, bias, scale_value, bias_value):
    return _fwd.call(x, scale, bias, scale_value=scale_value, bias_value=bias_value)[0]


def _scale_bias_gelu_fwd(x, scale, bias, scale_value, bias_value):
    y = _fwd.call(x, scale, bias, scale_value=scale_value, bias_value=bias_value)[0]
    return y, (x, scale, bias)


def _scale_bias_gelu_bwd(scale_value, bias_value, res, dy):
    x, scale, bias = res
    return tuple(_bwd.call(x, scale, bias, dy, scale_value=scale_value, bias_value=bias_value,
                           grad_dims=(grad_dim(scale), grad_dim(bias))))


_scale_bias_gelu.defvjp(_scale_bias_gelu_fwd, _scale_bias_gelu_bwd)


def _split(p, cols, name):
    """A Python number -> (static value, absent array); an array of shape (C,) -> (unused, float32)."""
    if isinstance(p, numbers.Real) and not isinstance(p, bool):
        return float(p), absent()
    if isinstance(p, bool) or p is None:
        raise TypeError(f"scale_bias_gelu: {name} must be a Python number or an array of shape ({cols},), "
                        f"got {p!r}")
    p = check_param(p, cols, "scale_bias_gelu", name)
    return (1.0 if name == "scale" else 0.0), p.astype(f32)


def scale_bias_gelu(x, scale=1.0, bias=0.0):
    """gelu_tanh(x * scale + bias) in one pass over x.

    scale, bias: each a Python number (static, not differentiated) or an array of shape (C,) = the last
    axis of x (differentiable; any float dtype). x: float32, bfloat16 or float16; math in float32.
    """
    x = check_input(x, "scale_bias_gelu")
    cols = x.shape[-1]
    scale_value, scale_arr = _split(scale, cols, "scale")
    bias_value, bias_arr = _split(bias, cols, "bias")
    if x.size == 0:
        return reference.scale_bias_gelu(x, scale, bias)
    return _scale_bias_gelu(*match_varying(x, scale_arr, bias_arr), scale_value, bias_value)
