"""Row softmax as a custom call: forward kernel(s) by algorithm name, one backward kernel from saved y."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from . import reference
from ._primitive import ROW, FfiPrimitive, Spec, np_attr
from ._validate import check_axis, check_choice, check_input

# Index i of a name is the `algorithm` attribute the kernels receive.
SOFTMAX_ALGORITHMS = ("auto",)

_fwd = FfiPrimitive(
    Spec("softmax_fwd", operands=(ROW,), results=(ROW,), attrs={"algorithm": np_attr("i64")}),
    reference=lambda x, algorithm: (reference.softmax(x),),
)
_bwd = FfiPrimitive(
    Spec("softmax_bwd", operands=(ROW, ROW), results=(ROW,), attrs={}),
    reference=lambda y, dy: (reference.softmax_bwd(y, dy),),
)


@functools.partial(jax.custom_vjp, nondiff_argnums=(1,))
def _softmax_last(x, algorithm):
    (y,) = _fwd.call(x, algorithm=algorithm)
    return y


def _softmax_last_fwd(x, algorithm):
    # The primitive itself, not _softmax_last: a custom_vjp nested in its own fwd rule would block
    # forward-over-reverse AD (jax.hessian).
    (y,) = _fwd.call(x, algorithm=algorithm)
    return y, y


def _softmax_last_bwd(algorithm, y, dy):
    (dx,) = _bwd.call(y, dy)
    return (dx,)


_softmax_last.defvjp(_softmax_last_fwd, _softmax_last_bwd)


def softmax(x, axis=-1, *, algorithm="auto"):
    """Softmax of `x` along `axis`, like `jax.nn.softmax`, by a handwritten kernel.

    x: float32, bfloat16 or float16 array of rank >= 1 (computed in float32; output dtype = x.dtype).
    axis: the axis to normalize. The kernels work on the last axis: any other axis is moved there and back,
        which costs two transposes (a read and a write of x each).
    algorithm: one of SOFTMAX_ALGORITHMS.
    """
    x = check_input(x, "softmax")
    axis = check_axis(axis, x.ndim, "softmax")
    index = SOFTMAX_ALGORITHMS.index(check_choice(algorithm, SOFTMAX_ALGORITHMS, "softmax", "algorithm"))
    if x.size == 0:
        return reference.softmax(x, axis=axis)
    if axis == x.ndim - 1:
        return _softmax_last(x, index)
    return jnp.moveaxis(_softmax_last(jnp.moveaxis(x, axis, -1), index), -1, axis)
