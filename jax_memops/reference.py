"""XLA's own formulations of every op, in plain jax.numpy: what `jax.jit` fuses automatically.

They are the baseline of `jax-memops bench` and the tangent rules of the primitives (so that second-order
AD works). Each computes in float32 and returns the input dtype, as the kernels do.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

f32 = jnp.float32


def softmax(x, axis=-1):
    return jax.nn.softmax(x.astype(f32), axis=axis).astype(x.dtype)


def softmax_bwd(y, dy):
    """dx = y * (dy - sum(dy * y)) along the last axis."""
    y32, dy32 = y.astype(f32), dy.astype(f32)
    dot = jnp.sum(y32 * dy32, axis=-1, keepdims=True)
    return (y32 * (dy32 - dot)).astype(y.dtype)


def layer_norm_stats(x, epsilon, rms=False):
    """(xhat, mean, rstd) in float32 over the last axis; mean is zeros for RMSNorm."""
    x32 = x.astype(f32)
    mean = jnp.zeros(x.shape[:-1], f32) if rms else jnp.mean(x32, axis=-1)
    centered = x32 - mean[..., None]
    var = jnp.mean(jnp.square(centered), axis=-1)
    rstd = jax.lax.rsqrt(var + epsilon)
    return centered * rstd[..., None], mean, rstd


def layer_norm(x, scale=None, bias=None, epsilon=1e-5):
    """Flax-style LayerNorm over the last axis (biased variance, epsilon inside the square root)."""
    xhat, _, _ = layer_norm_stats(x, epsilon)
    y = xhat * (1.0 if scale is None else scale.astype(f32)) + (0.0 if bias is None else bias.astype(f32))
    return y.astype(x.dtype)


def rms_norm(x, scale=None, epsilon=1e-6):
    xhat, _, _ = layer_norm_stats(x, epsilon, rms=True)
    return (xhat * (1.0 if scale is None else scale.astype(f32))).astype(x.dtype)


def gelu(u):
    """tanh-form GELU, 0.5 u (1 + tanh(sqrt(2/pi) (u + 0.044715 u^3)))."""
    return jax.nn.gelu(u, approximate=True)


def scale_bias_gelu(x, scale=1.0, bias=0.0):
    s = scale.astype(f32) if hasattr(scale, "dtype") else scale
    b = bias.astype(f32) if hasattr(bias, "dtype") else bias
    return gelu(x.astype(f32) * s + b).astype(x.dtype)
