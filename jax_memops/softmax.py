"""Row softmax as a custom call: forward kernel(s) by algorithm name, one backward kernel from saved y
(reverse mode, and forward mode's tangent map: softmax's Jacobian is symmetric)."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.interpreters import ad

from . import reference
from ._primitive import ROW, FfiPrimitive, Spec, np_attr, over_rows
from ._validate import check_axes, check_choice, check_input, check_where

# Index i of a name is the `algorithm` attribute the kernels receive. 0: the tuned kernel; 1..7: the
# seed's teaching ladder v1..v7 (cpp/softmax_ladder.cu), same semantics, on the CPU all the one kernel.
SOFTMAX_ALGORITHMS = (
    "auto",
    "thread_per_row",  # v1: one thread per row, three serial passes (max, sum, normalize)
    "block_shared",  # v2: one block per row, shared-memory tree reductions
    "warp_shuffle",  # v3: one warp per row (block of 32), warp-shuffle reductions
    "warp_block",  # v4: one block per row, shuffles within warps + shared memory across warps
    "online_thread_per_row",  # v5: online softmax (fused max+sum pass), one thread per row
    "online_warp",  # v6: online softmax, one warp per row, cg::reduce of (max, sum), streaming stores
    "unrolled",  # v7: v4 with 8 independent streaming loads in flight per thread (long rows)
)

f32 = jnp.float32


# -- rows whose columns a mesh splits over the axes `axes` (see _sharding.py): a distributed softmax ---
def _fwd_columns(axes, x, algorithm):
    """Each device holds a block of columns: row max and row sum of exp are reduced over `axes` (two
    all-reduces of one float per row) instead of all-gathering x."""
    del algorithm
    x32 = x.astype(f32)
    m = jax.lax.pmax(jnp.max(x32, axis=-1, keepdims=True), axes)
    e = jnp.exp(x32 - m)
    return ((e / jax.lax.psum(jnp.sum(e, axis=-1, keepdims=True), axes)).astype(x.dtype),)


def _bwd_columns(axes, y, dy):
    y32, dy32 = y.astype(f32), dy.astype(f32)
    dot = jax.lax.psum(jnp.sum(y32 * dy32, axis=-1, keepdims=True), axes)
    return ((y32 * (dy32 - dot)).astype(y.dtype),)


_fwd = FfiPrimitive(
    Spec("softmax_fwd", operands=(ROW,), results=(ROW,), attrs={"algorithm": np_attr("i64")}),
    reference=lambda x, algorithm: (reference.softmax(x),),
    columns=_fwd_columns,
)
_bwd = FfiPrimitive(
    Spec("softmax_bwd", operands=(ROW, ROW), results=(ROW,), attrs={}),
    reference=lambda y, dy: (reference.softmax_bwd(y, dy),),
    columns=_bwd_columns,
)


def _bwd_transpose(cts, y, dy):
    """The backward kernel is linear in dy, and softmax's Jacobian is symmetric: dy -> y * (dy - sum(dy * y))
    is its own transpose. So the JVP below is the backward kernel, and grad transposes it into the
    backward kernel again."""
    (ct,) = cts
    if ad.is_undefined_primal(y):
        raise NotImplementedError("jax_memops softmax backward: linear in dy only, y must be known")
    if type(ct) is ad.Zero:
        return [None, None]
    return [None, _bwd.call(y, ct)[0]]


ad.primitive_transposes[_bwd.prim] = _bwd_transpose


@functools.partial(jax.custom_jvp, nondiff_argnums=(1,))
def _softmax_last(x, algorithm):
    (y,) = _fwd.call(x, algorithm=algorithm)
    return y


@_softmax_last.defjvp
def _softmax_last_jvp(algorithm, primals, tangents):
    (y,) = _fwd.call(primals[0], algorithm=algorithm)
    return y, _bwd.call(y, tangents[0])[0]


def softmax(x, axis=-1, where=None, *, algorithm="auto"):
    """Softmax of `x` along `axis`, like `jax.nn.softmax`, by a handwritten kernel.

    x: float32, bfloat16 or float16 array of rank >= 1 (computed in float32; output dtype = x.dtype).
    axis: the axis to normalize, a tuple of them (their entries form one row), or None (all of x is one row).
        The kernels work on the last axis: axes that are not the trailing ones are moved there and back,
        which costs two transposes (a read and a write of x each).
    where: None, or a mask broadcastable to x's shape, as `jax.nn.softmax`'s: the entries where it is False
        take no part in their row's max and sum and come out 0 (a row with none left gives zeros, its
        gradient zeros). The kernel sees x with those entries at -inf; the two selects around it are
        elementwise passes that XLA fuses with their neighbours where it can.
    algorithm: one of SOFTMAX_ALGORITHMS: "auto" (the tuned kernel, the default) or a step of the seed's
        softmax ladder, "thread_per_row" (v1), "block_shared" (v2), "warp_shuffle" (v3), "warp_block"
        (v4), "online_thread_per_row" (v5), "online_warp" (v6), "unrolled" (v7). All give the same
        results up to rounding (the same -inf/NaN semantics); on the CPU they are one kernel.
    """
    x = check_input(x, "softmax")
    axes = check_axes(axis, x.ndim, "softmax")
    index = SOFTMAX_ALGORITHMS.index(check_choice(algorithm, SOFTMAX_ALGORITHMS, "softmax", "algorithm"))
    return _softmax(x, check_where(where, x.shape, "softmax"), axes=axes, index=index)


# Jitted once the arguments are checked: an eager call then takes jit's cached fast path (a call through
# custom_jvp and the primitive's own dispatch took ~7x jax.nn.softmax's time); under an outer jit it is inlined.
@functools.partial(jax.jit, static_argnames=("axes", "index"))
def _softmax(x, where, *, axes, index):
    if where is not None:
        # -inf entries give exactly 0 and add nothing to the row's sum; a row of only -inf gives NaN, which the outer
        # select turns into jax.nn.softmax's zeros (and its gradient, a select too, into zeros).
        y = _softmax(jnp.where(where, x, -jnp.inf), None, axes=axes, index=index)
        return jnp.where(where, y, jnp.zeros((), y.dtype))
    if x.size == 0:
        return reference.softmax(x, axis=axes)
    return over_rows(lambda rows: _softmax_last(rows, index), x, axes)
