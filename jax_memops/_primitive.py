"""One base for every jax_memops custom call: a JAX primitive with abstract eval, a lowering per platform
(cpu -> the C++ handler, cuda -> the CUDA handler), a batching rule that folds mapped axes into rows,
and a differentiable `call` whose tangents come from a pure-jnp reference (so the backward primitives can
be differentiated again: second-order AD works).

Operand kinds (the C++ side documents the same conventions in cpp/ffi_common.h):
  ROW    (..., C) tensor of the op's dtype (x, y, dy)       -> result ROW: like operand 0
  STAT   (...,) float32, one value per row (mean, rstd)     -> result STAT
  PARAM  float32 (C,), or (G, C) row groups, or (0,) absent  (scale, bias)
  GRAD   result only: float32 sums over G row groups, (C,) for G = 1, (G, C), or (0,) when not wanted;
         G per GRAD result is the primitive parameter `grad_groups`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend.core import Primitive
from jax.interpreters import batching, mlir

ROW, STAT, PARAM, GRAD = "row", "stat", "param", "grad"

TARGET_PREFIX = "jax_memops_"


@dataclass(frozen=True)
class Spec:
    name: str                       # target is TARGET_PREFIX + name
    operands: tuple[str, ...]       # kinds, operand 0 is the ROW input that fixes rows, C and dtype
    results: tuple[str, ...]        # kinds
    attrs: dict                     # FFI attribute name -> numpy scalar type, taken from the params


def absent() -> jax.Array:
    """The (0,) float32 placeholder for an absent parameter or an unwanted gradient."""
    return jnp.zeros((0,), jnp.float32)


def _grad_shape(groups: int, cols: int) -> tuple[int, ...]:
    return (0,) if groups == 0 else (cols,) if groups == 1 else (groups, cols)


class FfiPrimitive:
    def __init__(self, spec: Spec, reference: Callable):
        self.spec = spec
        self.target = TARGET_PREFIX + spec.name
        self.reference = reference  # pure-jnp function with the primitive's signature and params
        self.prim = Primitive(self.target)
        self.prim.multiple_results = True
        self.prim.def_impl(self._impl)
        self.prim.def_abstract_eval(self._abstract_eval)
        lowering = jax.ffi.ffi_lowering(self.target)
        for platform in ("cpu", "cuda"):
            mlir.register_lowering(self.prim, functools.partial(self._lower, lowering), platform=platform)
        batching.primitive_batchers[self.prim] = self._batch
        self.call = self._make_call()

    # -- evaluation -------------------------------------------------------------------------------
    def _impl(self, *args, **params):
        return _jitted_bind(self.prim, tuple(sorted(params.items())))(*args)

    def _abstract_eval(self, *avals, grad_groups=(), **attrs):
        x = avals[0]
        cols = x.shape[-1]
        groups = iter(grad_groups)
        out = []
        for kind in self.spec.results:
            if kind == ROW:
                out.append(jax.core.ShapedArray(x.shape, x.dtype))
            elif kind == STAT:
                out.append(jax.core.ShapedArray(x.shape[:-1], jnp.float32))
            else:
                out.append(jax.core.ShapedArray(_grad_shape(next(groups), cols), jnp.float32))
        return out

    def _lower(self, lowering, ctx, *args, grad_groups=(), **attrs):
        del grad_groups  # encoded in the result shapes
        typed = {k: self.spec.attrs[k](v) for k, v in attrs.items()}
        return lowering(ctx, *args, **typed)

    # -- vmap: fold the mapped axis into the rows ----------------------------------------------------
    def _batch(self, args, dims, grad_groups=(), **attrs):
        size = next(a.shape[d] for a, d in zip(args, dims) if d is not None)
        cols = args[0].shape[-1 if dims[0] is None or dims[0] != args[0].ndim - 1 else -2]
        new_args = []
        for kind, a, d in zip(self.spec.operands, args, dims):
            if kind in (ROW, STAT):
                # Batch axis first, so the rows of one batch element are contiguous (a row group).
                a = jnp.broadcast_to(a, (size, *a.shape)) if d is None else jnp.moveaxis(a, d, 0)
            elif a.size == 0:
                a = absent()
            elif d is None:
                # One row group per (batch element, existing group): repeat only when already grouped.
                a = a if a.ndim == 1 else jnp.tile(a, (size, 1))
            else:
                a = jnp.moveaxis(a, d, 0).reshape(-1, cols)
            new_args.append(a)
        if GRAD in self.spec.results:
            attrs["grad_groups"] = tuple(g * size for g in grad_groups)
        outs = self.prim.bind(*new_args, **attrs)
        result = []
        groups = iter(grad_groups)
        for kind, o in zip(self.spec.results, outs):
            if kind == GRAD:
                g = next(groups)
                o = jnp.zeros((size, 0), jnp.float32) if g == 0 else o.reshape((size, *_grad_shape(g, cols)))
            result.append(o)
        return result, [0] * len(result)

    # -- differentiable entry point ------------------------------------------------------------------
    def _make_call(self):
        prim, reference = self.prim, self.reference

        @functools.partial(jax.custom_jvp, nondiff_argnums=(0,))
        def call(params, *args):
            return tuple(prim.bind(*args, **dict(params)))

        @call.defjvp
        def _jvp(params, primals, tangents):
            out = call(params, *primals)
            _, tan = jax.jvp(lambda *a: tuple(reference(*a, **dict(params))), primals, tangents)
            return out, tan

        def bind(*args, **params):
            return call(tuple(sorted(params.items())), *args)

        return bind


@functools.lru_cache(maxsize=None)
def _jitted_bind(prim, params):
    return jax.jit(lambda *a: prim.bind(*a, **dict(params)))


def to_f32_param(p) -> jax.Array:
    """A user's (C,) parameter as the float32 the kernels read, or the absent placeholder."""
    return absent() if p is None else jnp.asarray(p, jnp.float32)


def np_attr(kind):
    """Attribute types: Python floats lower as f64, the handlers read f32/i64."""
    return {"f32": np.float32, "i64": np.int64}[kind]
