"""Argument checks run in Python before anything is traced into a custom call."""

from __future__ import annotations

import numbers
import operator

import jax
import jax.numpy as jnp
import numpy as np

SUPPORTED_DTYPES = (jnp.dtype(jnp.float32), jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float16))
_SUPPORTED_NAMES = "float32, bfloat16 or float16"


def _dtype_of(x, op: str, name: str, what: str = "an array"):
    """The dtype JAX gives x (NumPy float64 becomes float32 unless x64 is enabled); a TypeError naming op's argument
    `name` where x is no array (strings included: NumPy would read them as arrays of text)."""
    try:
        if isinstance(x, (str, bytes)):
            raise TypeError
        dtype = x.dtype if hasattr(x, "dtype") else jnp.asarray(x).dtype
        return jnp.dtype(jax.dtypes.canonicalize_dtype(dtype))
    except TypeError as e:  # not array-like at all
        raise TypeError(f"{op}: {name} must be {what}, got {type(x).__name__}") from e


def check_input(x, op: str, name: str = "x"):
    """An x of a supported float dtype and rank >= 1, as a JAX array."""
    if x is None:
        raise TypeError(f"{op}: {name} must be an array, got NoneType")
    dtype = _dtype_of(x, op, name)
    if dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"{op}: {name} must have dtype {_SUPPORTED_NAMES}, got {dtype}")
    x = jnp.asarray(x)
    if x.ndim < 1:
        raise ValueError(f"{op}: {name} must have rank >= 1 (got a scalar of shape ())")
    return x


def check_param(p, shape, op: str, name: str, scalar_ok: bool = False, *, matches: str = "the last axis of x"):
    """A per-feature parameter of `shape` (an int C: (C,); or a tuple, the normalized axes' sizes) (or () where
    scalar_ok) and a floating dtype, or None. `matches` says which axes of x fix that shape."""
    if p is None:
        return None
    dtype = _dtype_of(p, op, name, "a floating-point array")
    if not jnp.issubdtype(dtype, jnp.floating):
        raise TypeError(f"{op}: {name} must be a floating-point array, got dtype {dtype}")
    want = (shape,) if isinstance(shape, int) else tuple(shape)
    got = tuple(np.shape(p))
    if got != want and not (scalar_ok and got == ()):
        wanted = f"shape {want} or ()" if scalar_ok else f"shape {want}"
        raise ValueError(f"{op}: {name} must have {wanted} to match {matches}, got {got}")
    return jnp.asarray(p)


def check_out_dtype(dtype, x, op: str):
    """An op's `dtype` (its output's): None where it is None or x's own (the same-dtype kernels), else one of
    the supported dtypes as a NumPy dtype."""
    if dtype is None:
        return None
    try:
        out = jnp.dtype(dtype)
    except TypeError as e:
        raise TypeError(f"{op}: dtype must be None or a dtype ({_SUPPORTED_NAMES}), got {dtype!r}") from e
    if out not in SUPPORTED_DTYPES:
        raise TypeError(f"{op}: dtype must be None, {_SUPPORTED_NAMES}, got {out}")
    return None if out == x.dtype else out


def check_norm_axes(axis, x, op: str) -> tuple[tuple[int, ...], tuple[int, ...], str]:
    """A norm's `axis` (an int, a sequence of ints or None, as check_axes reads it): (the sorted axes, the shape
    their parameters take: x's sizes along them, in x's order, and the words for those axes in messages)."""
    axes = check_axes(axis, x.ndim, op)
    shape = tuple(x.shape[a] for a in axes)
    matches = "the last axis of x" if axes == (x.ndim - 1,) else f"x's axes {axes} (sizes {shape})"
    return axes, shape, matches


def check_epsilon(epsilon, op: str) -> float:
    if isinstance(epsilon, bool) or not isinstance(epsilon, numbers.Real):
        raise TypeError(f"{op}: epsilon must be a Python float, got {type(epsilon).__name__}")
    epsilon = float(epsilon)
    if not (epsilon >= 0.0 and np.isfinite(epsilon)):
        raise ValueError(f"{op}: epsilon must be a finite number >= 0, got {epsilon}")
    return epsilon


def check_axes(axis, ndim: int, op: str) -> tuple[int, ...]:
    """jax.nn.softmax's `axis`: an int, a sequence of ints or None (every axis), as sorted non-negative axes."""
    if axis is None:
        return tuple(range(ndim))
    many = isinstance(axis, (tuple, list))
    try:
        axes = tuple(operator.index(a) for a in (axis if many else (axis,)))
    except TypeError as e:
        raise TypeError(f"{op}: axis must be an int, a tuple of ints or None, got {axis!r}") from e
    for a in axes:
        if not -ndim <= a < ndim:
            raise ValueError(f"{op}: axis {a} is out of range for an input of rank {ndim}")
    normalized = sorted(a % ndim for a in axes)
    if len(set(normalized)) != len(normalized):
        raise ValueError(f"{op}: axis {tuple(axes)} names an axis twice")
    return tuple(normalized)


def check_where(where, shape: tuple[int, ...], op: str):
    """A mask broadcastable to x's shape, as a boolean JAX array (nonzero entries count as True, as `jnp.where`
    reads its condition), or None."""
    if where is None:
        return None
    dtype = _dtype_of(where, op, "where", "a boolean array")
    if not (dtype == jnp.dtype(bool) or jnp.issubdtype(dtype, jnp.number)):
        raise TypeError(f"{op}: where must be a boolean array, got dtype {dtype}")
    where_shape = tuple(np.shape(where))
    try:
        fits = np.broadcast_shapes(where_shape, shape) == tuple(shape)
    except ValueError:
        fits = False
    if not fits:
        raise ValueError(f"{op}: where of shape {where_shape} does not broadcast to x's shape {tuple(shape)}")
    where = jnp.asarray(where)
    return where if where.dtype == jnp.dtype(bool) else where != 0


def check_choice(value, choices: tuple[str, ...], op: str, name: str) -> str:
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{op}: {name} must be one of {choices}, got {value!r}")
    return value
