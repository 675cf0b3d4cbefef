"""The fusion experiment's unfused pieces: y = x * s, y = x + b and y = gelu(x), each its own kernel and
custom call (targets jax_memops_scale, jax_memops_bias, jax_memops_gelu). Chained, they are the
three-kernel version of scale_bias_gelu that `jax-memops bench --fusion` sets against the fused kernel:
XLA cannot fuse custom calls, so each piece reads and writes the whole tensor. Beside them `copy` (target
jax_memops_copy): y = x by the device's own copy, the bench's second ceiling.
"""

from __future__ import annotations

import jax.numpy as jnp

from . import reference
from ._primitive import ROW, FfiPrimitive, Spec, np_attr
from ._validate import check_input

_VALUE = {"value": np_attr("f32")}


def _piece(name, f):
    # Elementwise: on a mesh that splits the last axis each device runs the kernel on its columns.
    return FfiPrimitive(Spec(name, (ROW,), (ROW,), _VALUE),
                        lambda x, value: (f(x.astype(jnp.float32), value).astype(x.dtype),), columns="local")


_scale = _piece("scale", lambda x, v: x * v)
_bias = _piece("bias", lambda x, v: x + v)
_gelu = _piece("gelu", lambda x, v: reference.gelu(x))
_copy = _piece("copy", lambda x, v: x)


def scale(x, s: float):
    """x * s (a Python number), one kernel."""
    return _scale.call(check_input(x, "scale"), value=float(s))[0]


def bias(x, b: float):
    """x + b (a Python number), one kernel."""
    return _bias.call(check_input(x, "bias"), value=float(b))[0]


def gelu(x):
    """gelu_tanh(x), one kernel."""
    return _gelu.call(check_input(x, "gelu"), value=0.0)[0]


def copy(x):
    """y = x by the device's copy (CUDA: cudaMemcpyAsync device to device; CPU: memcpy), one custom call: the bench's
    second ceiling (on the H200 4.17-4.20 TB/s at 256 MB timed on the device; benchmarks/RESULTS.md "v29")."""
    return _copy.call(check_input(x, "copy"), value=0.0)[0]


def three_kernels(x, s: float, b: float):
    """gelu(x * s + b) as three custom calls: 6 tensor passes where the fused kernel makes 2."""
    return gelu(bias(scale(x, s), b))
