"""Flax Linen layers on jax_memops' fused kernels: `jm.linen.LayerNorm` for `nn.LayerNorm`, and so on.

Subclasses of `flax.linen.LayerNorm` / `RMSNorm` that override only `__call__`: the same fields, defaults,
parameter names (`scale`, `bias`), shapes, dtypes and initializers, so parameter dicts are interchangeable
with Flax's. The kernel runs when Flax would normalize over trailing axes (the last one by default; `reduction_axes`
such as (-2, -1) too, their features any of them), in float32 statistics, with no `mask` or `axis_name`; anything
else runs Flax's own `__call__`. The kernel's variance is exact, so `use_fast_variance` changes nothing here.

`dot_product_attention` is an `attention_fn` for `nn.MultiHeadDotProductAttention` with the signature of
`flax.linen.dot_product_attention`, whose softmax is `jax_memops.softmax`.
"""

from __future__ import annotations

import functools
import numbers
from collections.abc import Iterable

import jax
import jax.numpy as jnp
from flax import linen as nn
from flax.linen import dtypes

from ._validate import SUPPORTED_DTYPES
from .norms import layer_norm, rms_norm
from .softmax import softmax

__all__ = ["LayerNorm", "RMSNorm", "dot_product_attention"]


def _canonical(axes, ndim):
    """Flax's canonical form of `axes` (sorted, non-negative), or None where one is out of range (Flax's own
    code then reports it)."""
    axes = axes if isinstance(axes, Iterable) else (axes,)
    if not all(isinstance(a, numbers.Integral) and -ndim <= a < ndim for a in axes):
        return None
    return tuple(sorted({a % ndim for a in axes}))


def kernel_axes(module, x, mask, stats_dtype):
    """The axes the kernel normalizes to reproduce Flax's normalization of x for this module (its config, not
    params), as (reduction axes, feature axes), or None. The reduction axes must be the trailing ones (flattened
    into the kernel's rows for free; others would cost two transposes, where Flax's own reduction costs none) and
    hold every feature axis (the parameters then broadcast over the other reduced axes, as in Flax)."""
    reduced = _canonical(module.reduction_axes, x.ndim) if x.ndim >= 1 else None
    features = _canonical(module.feature_axes, x.ndim) if x.ndim >= 1 else None
    applies = (mask is None and module.axis_name is None and reduced and features is not None
               and reduced == tuple(range(x.ndim - len(reduced), x.ndim)) and set(features) <= set(reduced)
               # The kernel takes a static Python epsilon (it rejects what would give NaN in Flax) and
               # always reduces in float32.
               and isinstance(module.epsilon, numbers.Real) and not isinstance(module.epsilon, bool)
               and 0 <= module.epsilon < float("inf")
               and jnp.dtype(stats_dtype) == jnp.float32)
    return (reduced, features) if applies else None


def kernel_dtype(x, *params, dtype):
    """The output dtype of Flax's normalization, or None where the kernel cannot produce it. Flax's output dtype
    comes from x, the params and `dtype` (a bfloat16 x with float32 params gives float32: y is never rounded to
    bfloat16); its statistics and y are computed in float32 from x as it is, as the kernel's are, which then
    rounds y once into that dtype (the norms' `dtype`): no conversion pass on either side."""
    out = jnp.dtype(dtypes.canonicalize_dtype(x, *params, dtype=dtype))
    return out if x.dtype in SUPPORTED_DTYPES and out in SUPPORTED_DTYPES else None


def _spread(p, x, axes):
    """A parameter over Flax's feature axes as the kernel's over the reduction axes: shaped by x's sizes along the
    features (NNX's are flat), broadcast along the reduced axes that are not features (Flax's reshape to its
    feature_shape)."""
    reduced, features = axes
    shape = tuple(x.shape[a] for a in reduced)
    if p is None or p.shape == shape:
        return p
    p = p.reshape([x.shape[a] if a in features else 1 for a in reduced])
    return jnp.broadcast_to(p, shape)


def normalize(x, scale, bias, *, dtype, epsilon, rms, axes):
    """The kernel's normalization of x into `dtype` (from `kernel_dtype`) over `axes` (from `kernel_axes`)."""
    scale, bias = _spread(scale, x, axes), _spread(bias, x, axes)
    kw = dict(epsilon=epsilon, axis=axes[0], dtype=dtype)
    return rms_norm(x, scale, **kw) if rms else layer_norm(x, scale, bias, **kw)


def _stats_dtype(module, x):
    """The dtype of Flax Linen's statistics (see flax.linen.normalization._compute_stats)."""
    dtype = x.dtype if module.dtype is None else module.dtype
    return jnp.promote_types(dtype, jnp.float32) if module.force_float32_reductions else dtype


def _param_dtype(module, name):
    """The dtype `module.param(name)` will return: a stored value's own (a checkpoint may hold another
    dtype than param_dtype), else param_dtype (what the initializer is asked for)."""
    stored = module.get_variable("params", name)
    return module.param_dtype if stored is None else stored.dtype


def _fused_call(module, x, mask, names, rms):
    """The kernel path, or None (and no params created) where Flax's own __call__ must run: linen forbids
    creating a param twice, so the decision is made before `module.param`."""
    x = jnp.asarray(x)
    axes = kernel_axes(module, x, mask, _stats_dtype(module, x))
    if axes is None:
        return None
    probes = [jnp.zeros((), _param_dtype(module, n)) for n in names]
    out = kernel_dtype(x, *probes, dtype=module.dtype)
    if out is None:
        return None
    inits = {"scale": module.scale_init, "bias": getattr(module, "bias_init", None)}
    # A list shape, as Flax passes it (x's sizes along the feature axes), so custom initializers see the same
    # arguments.
    shape = [x.shape[a] for a in axes[1]]
    params = {n: module.param(n, inits[n], shape, module.param_dtype) for n in names}
    return normalize(x, params.get("scale"), params.get("bias"), dtype=out, epsilon=module.epsilon,
                     rms=rms, axes=axes)


class LayerNorm(nn.LayerNorm):
    """`flax.linen.LayerNorm` computed by `jax_memops.layer_norm` where it applies (see the module doc)."""

    @nn.compact
    def __call__(self, x, *, mask=None):
        names = [n for n, on in (("scale", self.use_scale), ("bias", self.use_bias)) if on]
        y = _fused_call(self, x, mask, names, rms=False)
        return super().__call__(x, mask=mask) if y is None else y


class RMSNorm(nn.RMSNorm):
    """`flax.linen.RMSNorm` computed by `jax_memops.rms_norm` where it applies (see the module doc)."""

    @nn.compact
    def __call__(self, x, *, mask=None):
        y = _fused_call(self, x, mask, ["scale"] if self.use_scale else [], rms=True)
        return super().__call__(x, mask=mask) if y is None else y


# -- attention --------------------------------------------------------------------------------------------
def kernel_attends(query, key, value, bias, grouped=False):
    """Whether attention_weights below reproduces Flax's for these (promoted) inputs: dtypes the kernel takes, and
    shapes [..., L, H, D] with equal batch dims and heads, or (grouped) query heads a multiple of the key and value
    heads (grouped-query attention)."""
    if not query.ndim == key.ndim == value.ndim >= 3:
        return False
    q_heads, kv_heads = query.shape[-2], key.shape[-2]
    logits_dtype = query.dtype if bias is None else jnp.result_type(query.dtype, bias)
    return (query.dtype in SUPPORTED_DTYPES and logits_dtype in SUPPORTED_DTYPES
            and query.shape[:-3] == key.shape[:-3] == value.shape[:-3]
            and (q_heads == kv_heads or (grouped and kv_heads > 0 and q_heads % kv_heads == 0))
            and kv_heads == value.shape[-2] and query.shape[-1] == key.shape[-1] and key.shape[-3] == value.shape[-3])


def attention_weights(query, key, bias, keep, qk_einsum, *, float32_weights=False):
    """Flax's explicit attention weights (query and key promoted to one dtype) with the softmax by jm.softmax:
    logits of the query scaled by 1/sqrt(depth), plus bias; where `keep` is False the dtype's lowest finite value
    (not -inf: a fully masked row gets uniform weights, as in Flax); weights in the logits' dtype's softmax cast to
    the query's dtype, or float32 (linen's force_fp32_for_softmax)."""
    dtype = query.dtype
    logits = qk_einsum("...qhd,...khd->...hqk", query / jnp.sqrt(query.shape[-1]).astype(dtype), key)
    if bias is not None:
        logits = logits + bias
    if keep is not None:
        logits = jnp.where(keep, logits, jnp.finfo(dtype).min)
    return softmax(logits.astype(jnp.float32)) if float32_weights else softmax(logits).astype(dtype)


def attention_dropout(weights, key, rng, rate, broadcast, dtype):
    """Flax's attention dropout, the same draws (so, for the same rng, the same entries dropped as by Flax): a keep
    mask shared by the batch and head dims (broadcast) or one per weight, the kept ones scaled by 1 / (1 - rate) in
    the query's dtype."""
    keep_prob = 1.0 - rate
    shape = (1,) * (key.ndim - 2) + weights.shape[-2:] if broadcast else weights.shape
    keep = jax.random.bernoulli(rng, keep_prob, shape)
    return weights * (keep.astype(dtype) / jnp.asarray(keep_prob, dtype=dtype))


def dot_product_attention(query, key, value, bias=None, mask=None, broadcast_dropout=True, dropout_rng=None,
                          dropout_rate=0.0, deterministic=False, dtype=None, precision=None, module=None,
                          force_fp32_for_softmax=False, einsum_dot_general=None, qk_attn_weights_einsum=None,
                          attn_weights_value_einsum=None):
    """`flax.linen.dot_product_attention` with the attention softmax computed by `jax_memops.softmax`.

    Use as `nn.MultiHeadDotProductAttention(..., attention_fn=jm.linen.dot_product_attention)`. The computation is
    Flax's (`nn.dot_product_attention_weights`, then the weighted sum of values, each by the einsum Flax would use:
    `precision` and `einsum_dot_general`, or the two einsums given): bias, masking with the dtype's lowest value,
    softmax (here in float32 inside the kernel), weights cast to the input dtype (float32 with
    `force_fp32_for_softmax`), sown into `module` when given, then Flax's attention dropout where it is active (the
    same entries dropped for the same `dropout_rng`). Grouped-query shapes and the argument combinations Flax rejects
    run Flax's own function.
    """
    args = dict(query=query, key=key, value=value, bias=bias, mask=mask, broadcast_dropout=broadcast_dropout,
                dropout_rng=dropout_rng, dropout_rate=dropout_rate, deterministic=deterministic, dtype=dtype,
                precision=precision, module=module, force_fp32_for_softmax=force_fp32_for_softmax,
                einsum_dot_general=einsum_dot_general, qk_attn_weights_einsum=qk_attn_weights_einsum,
                attn_weights_value_einsum=attn_weights_value_einsum)
    custom = (qk_attn_weights_einsum, attn_weights_value_einsum)
    rejected = (None in custom and custom != (None, None)) or (
        bool(precision or einsum_dot_general) and custom != (None, None))
    query, key, value = dtypes.promote_dtype(query, key, value, dtype=dtype)
    if rejected or not kernel_attends(query, key, value, bias):
        return nn.dot_product_attention(**args)
    einsum = functools.partial(jnp.einsum, precision=precision, _dot_general=einsum_dot_general or jax.lax.dot_general)
    weights = attention_weights(query, key, bias, mask, qk_attn_weights_einsum or einsum,
                                float32_weights=force_fp32_for_softmax and query.dtype != jnp.float32)
    if module:
        module.sow("intermediates", "attention_weights", weights)
    if dropout_rate > 0.0 and not deterministic:
        weights = attention_dropout(weights, key, dropout_rng, dropout_rate, broadcast_dropout, query.dtype)
    return (attn_weights_value_einsum or einsum)("...hqk,...khd->...qhd", weights, value)
