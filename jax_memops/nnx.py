"""Flax NNX layers on jax_memops' fused kernels: `jm.nnx.LayerNorm` for `nnx.LayerNorm`, and so on.

`LayerNorm` and `RMSNorm` subclass `flax.nnx.LayerNorm` / `RMSNorm` and override only `__call__`: the same
constructor, defaults, parameter names, shapes, dtypes and initializers, so `nnx.state` trees are
identical and checkpoints load either way. The kernel runs when Flax would normalize over trailing axes, in
float32 statistics, with no `mask` or `axis_name` (the rules are in `jax_memops.linen`); anything else runs
Flax's own `__call__`.

`dot_product_attention` is an `attention_fn` for `nnx.MultiHeadAttention` with the signature of
`flax.nnx.dot_product_attention`, whose softmax is `jax_memops.softmax`.
"""

from __future__ import annotations

import functools
import math

import jax.numpy as jnp
from flax import nnx
from flax.nnx.nn import dtypes

from ._validate import SUPPORTED_DTYPES
from .linen import attention_dropout, attention_weights, kernel_attends, kernel_axes, kernel_dtype, normalize

__all__ = ["LayerNorm", "RMSNorm", "dot_product_attention"]


def _fused_call(module, x, mask, scale, bias, rms):
    """The kernel's result, or None where Flax's own __call__ must run."""
    scale = None if scale is None else scale[...]
    bias = None if bias is None else bias[...]
    # NNX promotes x and the params to one dtype first (module.promote_dtype, which may be the user's).
    given = x
    x, scale, bias = module.promote_dtype((x, scale, bias), dtype=module.dtype)
    stats_dtype = jnp.promote_types(x.dtype if module.dtype is None else module.dtype, jnp.float32)
    axes = kernel_axes(module, x, mask, stats_dtype)
    # NNX's parameters are (num_features,), which Flax reshapes to x's sizes along the feature axes: where they
    # do not fit, Flax's own code reports it.
    features = math.prod(x.shape[a] for a in axes[1]) if axes else None
    if axes is None or any(p is not None and p.size != features for p in (scale, bias)):
        return None
    out = kernel_dtype(x, scale, bias, dtype=module.dtype)
    if out is None:
        return None
    return normalize(_unpromoted(module, given, x), scale, bias, dtype=out, epsilon=module.epsilon, rms=rms,
                     axes=axes)


def _unpromoted(module, given, x):
    """The x the kernel reads: the one given where Flax's own promote_dtype only widened it (exact: the kernel
    computes in float32 from it and writes the promoted dtype, with no conversion pass before it), else the
    promoted x (rounded to a narrower dtype, as Flax computes from it; or a user's promote_dtype)."""
    if module.promote_dtype is not dtypes.promote_dtype or not hasattr(given, "dtype"):
        return x
    wider = given.dtype in SUPPORTED_DTYPES and jnp.promote_types(given.dtype, x.dtype) == x.dtype
    return jnp.asarray(given) if wider else x


class LayerNorm(nnx.LayerNorm):
    """`flax.nnx.LayerNorm` computed by `jax_memops.layer_norm` where it applies (see the module doc)."""

    def __call__(self, x, *, mask=None):
        y = _fused_call(self, x, mask, self.scale, self.bias, rms=False)
        return super().__call__(x, mask=mask) if y is None else y


class RMSNorm(nnx.RMSNorm):
    """`flax.nnx.RMSNorm` computed by `jax_memops.rms_norm` where it applies (see the module doc)."""

    def __call__(self, x, mask=None):  # mask is positional here, as in Flax
        y = _fused_call(self, x, mask, self.scale, None, rms=True)
        return super().__call__(x, mask=mask) if y is None else y


def dot_product_attention(query, key, value, bias=None, mask=None, broadcast_dropout=True, dropout_rng=None,
                          dropout_rate=0.0, deterministic=False, dtype=None, precision=None, module=None,
                          promote_dtype=dtypes.promote_dtype, is_causal=False):
    """`flax.nnx.dot_product_attention` with the attention softmax computed by `jax_memops.softmax`.

    Use as `nnx.MultiHeadAttention(..., attention_fn=jm.nnx.dot_product_attention)`. The computation is
    that of Flax's explicit path (`nnx.dot_product_attention_weights`, then the weighted sum of values):
    logits in the promoted input dtype, then bias, masking with the dtype's lowest value, softmax (here
    in float32 inside the kernel), weights cast to the input dtype, sown into `module` when given, then
    Flax's attention dropout where it is active (the same entries dropped for the same `dropout_rng`).
    Grouped-query attention (query heads a multiple of the key and value heads) takes Flax 0.12.8's einsums.
    (Flax's own function, in 0.12.8, calls `jax.nn.dot_product_attention` where the dropout rate is 0 and there
    is no `module`: on a GPU possibly cuDNN's fused attention, which never writes the weights to memory; this
    function always does.)
    """
    args = dict(query=query, key=key, value=value, bias=bias, mask=mask, broadcast_dropout=broadcast_dropout,
                dropout_rng=dropout_rng, dropout_rate=dropout_rate, deterministic=deterministic, dtype=dtype,
                precision=precision, module=module, promote_dtype=promote_dtype, is_causal=is_causal)
    query, key, value = promote_dtype((query, key, value), dtype=dtype)
    if not kernel_attends(query, key, value, bias, grouped=True):
        return nnx.dot_product_attention(**args)
    keep = None
    if mask is not None or is_causal:
        keep = True if mask is None else jnp.asarray(mask).astype(bool)
        if is_causal:
            keep = jnp.logical_and(keep, jnp.tril(jnp.ones((query.shape[-3], key.shape[-3]), bool)))
    einsum = functools.partial(jnp.einsum, precision=precision)
    groups = query.shape[-2] // key.shape[-2]
    weights = attention_weights(query, key, bias, keep, einsum if groups == 1 else _grouped_logits(einsum, groups))
    if module is not None:
        module.sow(nnx.Intermediate, "attention_weights", weights)
    if dropout_rate > 0.0 and not deterministic:
        weights = attention_dropout(weights, key, dropout_rng, dropout_rate, broadcast_dropout, query.dtype)
    if groups == 1:
        return einsum("...hqk,...khd->...qhd", weights, value)
    # Grouped-query attention, as Flax: weights [..., H_kv, G, Q, K] against values [..., K, H_kv, 1, D].
    grouped = weights.reshape(weights.shape[:-3] + (value.shape[-2], groups) + weights.shape[-2:])
    out = einsum("...hgqk,...kh1d->...qhgd", grouped, jnp.expand_dims(value, -2))
    return out.reshape(out.shape[:-3] + (query.shape[-2], out.shape[-1]))


def _grouped_logits(einsum, groups):
    """The logits einsum of grouped-query attention, as Flax's: query heads [..., Q, H_kv * G, D] split into
    [..., Q, H_kv, G, D] against keys [..., K, H_kv, 1, D], the result's [..., H_kv, G, Q, K] merged into
    [..., H_kv * G, Q, K], the layout of ungrouped logits."""
    def logits(spec, query, key):
        del spec  # "...qhd,...khd->...hqk", grouped here
        query = query.reshape(query.shape[:-2] + (key.shape[-2], groups, query.shape[-1]))
        w = einsum("...qhgd,...kh1d->...hgqk", query, jnp.expand_dims(key, -2))
        return w.reshape(w.shape[:-4] + (w.shape[-4] * groups,) + w.shape[-2:])
    return logits
