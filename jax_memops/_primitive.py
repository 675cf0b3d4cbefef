"""One base for every jax_memops custom call: a JAX primitive with abstract eval, a lowering (the FFI
target of the same name on cpu and cuda, partitioned over a device mesh by _sharding.py), a batching rule
that folds mapped axes into rows, and a differentiable `call` whose tangents come from a pure-jnp
reference (so the backward primitives can be differentiated again: second-order AD works). And
LinearPrimitive, an op's tangent map, which reverse mode transposes into the op's backward kernel, and
JvpPrimitive, an op's value and tangent in one custom call, which forward mode runs (each op is a custom_jvp
binding its JvpPrimitive; partial evaluation, as reverse mode does it, splits that into the op's forward
primitive and its tangent map).

Operand kinds (the C++ side documents the same conventions in cpp/ffi_common.h, where a group-shaped
array is "G*C elements", G = prod(x.shape[:k])):
  ROW    (..., C) tensor (x, y, dy)                         -> result ROW: like operand 0, or of the
         primitive param `y_dtype` where a forward gives one (the norms' output dtype; dy then has it too)
  STAT   (...,) float32, one value per row (mean, rstd)     -> result STAT
  PARAM  float32 (C,), or x.shape[:k] + (C,): one row per group of x's first k dims (vmap of batched
         params), or (0,) absent                             (scale, bias)
  GRAD   result only: float32 sums over the rows of each group of x's first k dims, shape
         x.shape[:k] + (C,); k per GRAD result is the primitive parameter `grad_dims` (None: not wanted,
         shape (0,)). Keeping the group dims (not flattening them to G) lets a mesh shard them like x.

A Spec may also name a workspace: one more float32 result of the FFI call, scratch memory for the kernel
(XLA allocates it with the other buffers; a handler must not cudaMalloc). It exists only in the lowering
(`lower_plain`, `per_device`): abstract eval, batching, VJPs and sharding rules never see it. Its shape is
a function of the local (per-device) x shape, dtype and grad_dims; see `partials_workspace`.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
from dataclasses import dataclass
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend.core import Primitive, set_current_trace
from jax.extend.core.primitives import closed_call_p
from jax.interpreters import ad, batching, mlir
from jax.interpreters import partial_eval as pe

from . import _sharding

ROW, STAT, PARAM, GRAD = "row", "stat", "param", "grad"

TARGET_PREFIX = "jax_memops_"


@dataclass(frozen=True)
class Spec:
    name: str                       # target is TARGET_PREFIX + name
    operands: tuple[str, ...]       # kinds, operand 0 is the ROW input that fixes rows, C and dtype
    results: tuple[str, ...]        # kinds
    attrs: dict                     # FFI attribute name -> numpy scalar type, taken from the params
    # (x_shape, x_dtype, grad_dims) -> shape of an extra float32 workspace result, or None (no workspace)
    workspace: Callable | None = None


def dtype_or(dtype, default):
    """dtype, or default where it is None (a NumPy dtype's truth value is not its presence)."""
    return default if dtype is None else dtype


def absent() -> jax.Array:
    """The (0,) float32 placeholder for an absent parameter or an unwanted gradient."""
    return jnp.zeros((0,), jnp.float32)


# -- the [P x C] workspace of the parameter-gradient partials --------------------------------------------
PARTIALS_TARGET = 264   # two blocks per SM on the 132 SMs of an H200 (two waves of one, or one wave of two)
PARTIALS_FLOOR = 132    # never fewer partial rows than SMs (while there are rows): idle SMs cost more
PARTIALS_BYTES = 256    # else at most one partial row per 256 bytes of each column of x
PARTIALS_BYTES_TEAMS = 128  # norms' rows on teams of <= 256 threads: two blocks per SM are worth twice the partials
TEAM_BLOCK = 256        # the norms' backward runs two such blocks per SM once its grid gives (nearly) every SM two
PAIRED_GRID = 2 * PARTIALS_FLOOR - PARTIALS_FLOOR // 8  # ... i.e. from 248 blocks (norm_bwd.cu, norm_bwd_one_pass)


def partial_rows(rows: int, groups: int, itemsize: int, cols: int | None = None) -> int:
    """P, the partial rows per row group of the backward kernels' workspace: a pure function of the row
    count, the number of row groups G, x's element size and, for the norms, the row length C (so the
    lowering and the kernel agree, and the compiled program does not depend on the device it was lowered
    on).

    Each partial row is one CUDA block's column sums over a contiguous run of rows of one group (dscale
    and dbias partials, f32), summed per column in fixed order by a second small kernel; the backward's
    grid is G*P blocks. Writing and reading the partials costs 16 bytes per partial element and grad.
    GELU (cols None): P*G aims at 264 blocks, capped at rows*itemsize/256 so that the partials cost
    <= ~2% of the three passes over x, dy, dx, but never below 132 (every SM gets a block). The norms
    (cols given; RESULTS.md "v30"): 264 where a row's team has <= 256 threads (16 elements per thread, 8
    where C is not a multiple of the 16-byte vector) and rows*itemsize/128 >= 248 — two 256-thread blocks
    per SM run their row barriers out of phase, worth twice the partials (<= ~4.5% of the traffic): bf16
    C = 4096 +7% over 132 — else 132: one block per SM (from 248 blocks the kernel takes 256 threads, below
    that 512; 133..247 blocks of 512 leave a second, partial wave: 0.69x at P = 170, and a second full
    wave of 512-thread teams loses 3-8%). JAX_MEMOPS_NORM_PARTIALS=v29 (read when a backward is traced)
    gives the norms GELU's rule, as before v30. Never above the rows of a group. The CPU handlers sum their
    parameter gradients through the first few of each group's partial rows (cpp/cpu_grad_sums.h)."""
    if rows <= 0 or groups <= 0:
        return 0
    if cols is None or os.environ.get("JAX_MEMOPS_NORM_PARTIALS") == "v29":  # v29: the norms by GELU's rule
        total = max(min(PARTIALS_TARGET, rows * itemsize // PARTIALS_BYTES), PARTIALS_FLOOR)
    else:
        per_thread = 16 if cols % (16 // itemsize) == 0 else 8
        team = 1 << max(0, math.ceil(cols / per_thread) - 1).bit_length()
        paired = team <= TEAM_BLOCK and rows * itemsize // PARTIALS_BYTES_TEAMS >= PAIRED_GRID
        total = PARTIALS_TARGET if paired else PARTIALS_FLOOR
    return max(1, min(-(-total // groups), rows // groups))


def partials_workspace(x_shape, dtype, grad_dims, by_team: bool = False):
    """Workspace shape (S, G*P, C) for S wanted gradients sharing one row grouping (G groups of x's first
    k dims); None when no gradient is wanted or their groupings differ (the kernels then fall back to
    their re-reading column-sum path). by_team: P by the norms' rule (partial_rows with C)."""
    wanted = [k for k in grad_dims if k is not None]
    if not wanted or any(k != wanted[0] for k in wanted):
        return None
    rows = int(np.prod(x_shape[:-1], dtype=np.int64))
    groups = int(np.prod(x_shape[:wanted[0]], dtype=np.int64))
    p = partial_rows(rows, groups, jnp.dtype(dtype).itemsize, x_shape[-1] if by_team else None)
    return (len(wanted), groups * p, x_shape[-1])


norm_partials_workspace = functools.partial(partials_workspace, by_team=True)


def _grad_shape(k: int | None, x_shape: tuple[int, ...]) -> tuple[int, ...]:
    return (0,) if k is None else (*x_shape[:k], x_shape[-1])


def fold_batch(kinds, args, dims):
    """vmap's batching of a primitive with operands of the given kinds: (batch size, operands with the
    mapped axis folded into the rows). ROW/STAT operands get the batch axis first, so the rows of one
    batch element are contiguous (a row group); a mapped PARAM becomes one row per group."""
    size = next(a.shape[d] for a, d in zip(args, dims) if d is not None)
    new_args = []
    for kind, a, d in zip(kinds, args, dims):
        if kind in (ROW, STAT):
            a = jnp.broadcast_to(a, (size, *a.shape)) if d is None else jnp.moveaxis(a, d, 0)
        elif a.size == 0:
            a = a.reshape(0)  # absent, reshaped rather than recreated: keeps shard_map's varying axes
        elif d is None:
            # Groups of x's leading dims: the new batch dim joins them only when already grouped.
            a = a if a.ndim == 1 else jnp.broadcast_to(a, (size, *a.shape))
        else:
            a = jnp.moveaxis(a, d, 0)
        new_args.append(a)
    return size, new_args


def row_param(p, x):
    """A PARAM operand shaped to broadcast against x: (C,) as is, a grouped x.shape[:k] + (C,) with unit
    dims between the group dims and the last."""
    return p if p.ndim <= 1 else p.reshape(*p.shape[:-1], *(1,) * (x.ndim - p.ndim), p.shape[-1])


def over_rows(fn, x, axes: tuple[int, ...]):
    """fn over rows made of x's `axes` (sorted, non-negative): they are moved last (a transpose unless they
    already are) and flattened into one axis, so that the kernels see one row per combination of the other
    axes; fn's result, of the flattened shape, goes back to x's layout (and, on explicit mesh axes, sharding:
    _sharding.mergeable). The last axis alone passes x as is."""
    if axes == (x.ndim - 1,):
        return fn(x)
    rest = tuple(a for a in range(x.ndim) if a not in axes)
    order = rest + axes
    moved = order != tuple(range(x.ndim))
    xt = jnp.transpose(x, order) if moved else x
    xt, resplit = _sharding.mergeable(xt, len(rest))
    lead = xt.shape[: len(rest)]
    yt = resplit(fn(xt.reshape(*lead, math.prod(xt.shape[len(rest):]))).reshape(xt.shape))
    return jnp.transpose(yt, np.argsort(order)) if moved else yt


class FfiPrimitive:
    def __init__(self, spec: Spec, reference: Callable, columns=None):
        """columns: how the op runs when a mesh shards the last axis (see _sharding.py): None (the
        last axis is all-gathered), "local" (columns are independent: each device runs the kernel on
        its columns) or a function (axes, *args, **params) -> results computing on column blocks with
        collectives over the mesh axes `axes`."""
        self.spec = spec
        self.target = TARGET_PREFIX + spec.name
        self.reference = reference  # pure-jnp function with the primitive's signature and params
        self.columns = columns
        self.prim = Primitive(self.target)
        self.prim.multiple_results = True
        self.prim.def_impl(self._impl)
        self.prim.def_abstract_eval(self._abstract_eval)
        self._ffi_lowering = jax.ffi.ffi_lowering(self.target)
        for platform in ("cpu", "cuda"):
            mlir.register_lowering(self.prim, _sharding.lowering(self), platform=platform)
        _sharding.requires_devices(self.prim)
        batching.primitive_batchers[self.prim] = self._batch
        self.call = self._make_call()

    # -- evaluation -------------------------------------------------------------------------------
    def _impl(self, *args, **params):
        return _jitted_bind(self.prim, tuple(sorted(params.items())))(*args)

    def _result_shapes(self, x, grad_dims, y_dtype=None) -> list[jax.ShapeDtypeStruct]:
        dims = iter(grad_dims)
        f32 = jnp.dtype(jnp.float32)
        row = dtype_or(y_dtype, x.dtype)
        shape = {ROW: lambda: (x.shape, row), STAT: lambda: (x.shape[:-1], f32),
                 GRAD: lambda: (_grad_shape(next(dims), x.shape), f32)}
        return [jax.ShapeDtypeStruct(*shape[kind]()) for kind in self.spec.results]

    def _abstract_eval(self, *avals, grad_dims=(), y_dtype=None, **attrs):
        # Each result is typed like x (its sharding under explicit mesh axes, shard_map's varying axes).
        x = avals[0]
        return [_sharding.aval_like(x, kind, r.shape, r.dtype)
                for kind, r in zip(self.spec.results, self._result_shapes(x, grad_dims, y_dtype))]

    def _typed(self, attrs):
        return {k: self.spec.attrs[k](v) for k, v in attrs.items()}

    def _workspace(self, x, grad_dims) -> jax.ShapeDtypeStruct | None:
        """The extra float32 workspace result of the FFI call for operand 0 of type x, if any. A spec
        with a workspace always passes one ((0,) when its function gives None), so the handler's
        signature is fixed."""
        if self.spec.workspace is None:
            return None
        shape = self.spec.workspace(tuple(x.shape), x.dtype, tuple(grad_dims))
        return jax.ShapeDtypeStruct((0,) if shape is None else tuple(shape), jnp.float32)

    def lower_plain(self, ctx, *args, grad_dims=(), y_dtype=None, **attrs):
        """The bare custom call (on a mesh, XLA would gather its operands onto every device). y_dtype is
        already in ctx.avals_out, whose result types the handler reads."""
        ws = self._workspace(ctx.avals_in[0], grad_dims)  # grad_dims: otherwise only in result shapes
        if ws is None:
            return self._ffi_lowering(ctx, *args, **self._typed(attrs))
        # The FFI lowering types its results from ctx.avals_out: append the workspace, then drop it.
        avals_out = [*ctx.avals_out, jax.core.ShapedArray(ws.shape, ws.dtype)]
        replace = getattr(ctx, "replace", None)
        ctx = replace(avals_out=avals_out) if replace else dataclasses.replace(ctx, avals_out=avals_out)
        return self._ffi_lowering(ctx, *args, **self._typed(attrs))[:-1]

    def per_device(self, *args, grad_dims=(), y_dtype=None, **attrs):
        """The bare custom call on traced arrays: what each device runs on its shard."""
        types = self._result_shapes(args[0], grad_dims, y_dtype)
        ws = self._workspace(args[0], grad_dims)
        outs = jax.ffi.ffi_call(self.target, types + ([ws] if ws is not None else []))(
            *args, **self._typed(attrs))
        return tuple(outs[:len(types)])

    # -- vmap: fold the mapped axis into the rows ----------------------------------------------------
    def _batch(self, args, dims, grad_dims=(), **attrs):
        size, new_args = fold_batch(self.spec.operands, args, dims)
        if GRAD in self.spec.results:
            attrs["grad_dims"] = tuple(None if k is None else k + 1 for k in grad_dims)
        outs = self.prim.bind(*new_args, **attrs)
        dims_out = iter(grad_dims)
        result = [o.reshape(size, 0) if kind == GRAD and next(dims_out) is None else o
                  for kind, o in zip(self.spec.results, outs)]
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


class LinearPrimitive:
    """An op's tangent map (its JVP; linear in the tangent operands) as a primitive, so that reverse mode (grad,
    vjp) runs the handwritten backward kernel: it transposes it with `transpose(ct, *operands, **params)`, which
    calls the op's backward kernel once for every wanted cotangent. It is the unknown half of a JvpPrimitive's
    split (forward mode itself runs the JvpPrimitive's one call); where it is evaluated (a function that
    jax.linearize returned) it runs the pure-jnp `evaluate(*operands, **params)`, which XLA fuses. Were the
    tangent plain jnp, grad would transpose those jnp ops instead of running the backward kernel.

    The result is like operand 0 (x), or of the param `y_dtype` where one is given. Batching folds a mapped
    axis into the rows as FfiPrimitive does (grad of vmap still transposes one primitive), so `evaluate` must
    accept grouped parameters (row_param); the primitive's own JVP (forward over forward) differentiates
    `evaluate`."""

    def __init__(self, name: str, operands: tuple[str, ...], evaluate: Callable, transpose: Callable):
        self.operands = operands
        self.evaluate = evaluate
        self.prim = Primitive(TARGET_PREFIX + name)
        self.prim.def_impl(evaluate)
        self.prim.def_abstract_eval(
            lambda x, *_, y_dtype=None, **__: _sharding.aval_like(x, ROW, x.shape, dtype_or(y_dtype, x.dtype)))
        mlir.register_lowering(self.prim, mlir.lower_fun(evaluate, multiple_results=False))
        ad.primitive_jvps[self.prim] = self._jvp
        ad.primitive_transposes[self.prim] = transpose
        batching.primitive_batchers[self.prim] = self._batch

    def bind(self, *args, **params):
        return self.prim.bind(*args, **params)

    def _jvp(self, primals, tangents, **params):
        tangents = [ad.instantiate_zeros(t) for t in tangents]
        return jax.jvp(lambda *a: self.evaluate(*a, **params), tuple(primals), tuple(tangents))

    def _batch(self, args, dims, **params):
        return self.prim.bind(*fold_batch(self.operands, args, dims)[1], **params), 0


class JvpPrimitive(FfiPrimitive):
    """An op's value and tangent in one custom call: (primals..., tangents...) -> (y, its tangent), so that forward
    mode (jax.jvp, jacfwd) reads x and its tangent once and writes both results once (four passes), where the op's
    forward kernel and then its tangent map read x twice (five). Each op's custom_jvp rule binds it.

    Reverse mode never runs it whole: where partial evaluation knows the primals but not the tangents (linearize,
    grad; scan's, cond's or jax.checkpoint's partial evaluation of a JVP), it becomes `split(*operands, **params)`:
    the op's forward primitive on what is known and its LinearPrimitive tangent map on what is not, which transposes
    into the backward kernel, so that a training step holds one forward and one backward call per op as before. Its
    own JVP (forward over forward) differentiates the pure-jnp `reference` (-> (y, tangent)). The first half of the
    operands are the primals, the second their tangents."""

    def __init__(self, spec: Spec, reference: Callable, split: Callable, columns=None):
        super().__init__(spec, reference, columns)
        self.split = split
        self.primals = len(spec.operands) // 2
        ad.primitive_jvps[self.prim] = self._jvp
        pe.custom_partial_eval_rules[self.prim] = self._partial_eval
        pe.partial_eval_jaxpr_custom_rules[self.prim] = self._partial_eval_custom

    def bind(self, *args, **params):
        return tuple(self.prim.bind(*args, **params))

    def _batch(self, args, dims, **params):
        """vmap over tangents alone (jacfwd's basis, one primal point): y stays unbatched, made once by the split's
        forward; the tangents by its tangent map, batched. Otherwise the rows fold as for any primitive."""
        primals, tangents = args[:self.primals], args[self.primals:]
        if any(d is not None for d in dims[:self.primals]):
            return super()._batch(args, dims, **params)
        out = jax.vmap(lambda *t: tuple(self.split(*primals, *t, **params)), in_axes=tuple(dims[self.primals:]),
                       out_axes=(None, 0))(*tangents)
        return list(out), [None, 0]

    def _jvp(self, primals, tangents, **params):
        tangents = tuple(ad.instantiate_zeros(t) for t in tangents)
        _, out_tangents = jax.jvp(lambda *a: tuple(self.reference(*a, **params)), tuple(primals), tangents)
        return self.prim.bind(*primals, **params), list(out_tangents)

    def _partial_eval(self, trace, *tracers, **params):
        """JaxprTrace's rule (linearize, and partial_eval_jaxpr_nounits of scan, cond, while): with the primals
        known and a tangent not, the split; otherwise the default (all known: evaluated; a primal unknown: staged
        whole, as the forward and tangent primitives would be)."""
        known = [t.pval.is_known() for t in tracers]
        if all(known) or not all(known[:self.primals]):
            return trace.default_process_primitive(self.prim, tracers, params)
        with set_current_trace(trace):
            return list(self.split(*tracers, **params))

    def _partial_eval_custom(self, saveable, unks_in, inst_in, eqn):
        """partial_eval_jaxpr_custom's rule (jax.checkpoint, and scan's and jit's under it): the equation as a
        closed_call of the split, which that rule's own partial evaluation then divides."""
        split = jax.make_jaxpr(lambda *a: tuple(self.split(*a, **eqn.params)))(*(v.aval for v in eqn.invars))
        call = eqn.replace(primitive=closed_call_p, params={"call_jaxpr": split})
        return pe.partial_eval_jaxpr_custom_rules[closed_call_p](saveable, unks_in, inst_in, call)


def cotangents(args, wanted: dict[int, jax.Array]) -> list:
    """A transpose rule's result: wanted[i] for each operand i that is linear (an undefined primal),
    None (a zero cotangent) for every other operand."""
    return [_sharding.typed_like(wanted[i], a.aval) if ad.is_undefined_primal(a) and wanted.get(i) is not None
            else None for i, a in enumerate(args)]


def wants_grad(t) -> int | None:
    """The grad_dims entry for a PARAM tangent operand of a transpose rule: its group dims (0 for (C,))
    when it is linear and present, None when it is known (not differentiated) or absent."""
    if not ad.is_undefined_primal(t) or math.prod(t.aval.shape) == 0:
        return None
    return len(t.aval.shape) - 1


@functools.lru_cache(maxsize=None)
def _jitted_bind(prim, params):
    return jax.jit(lambda *a: prim.bind(*a, **dict(params)))


def to_f32_param(p) -> jax.Array:
    """A user's (C,) parameter as the float32 the kernels read, or the absent placeholder."""
    return absent() if p is None else jnp.asarray(p, jnp.float32)


def np_attr(kind):
    """Attribute types: Python floats lower as f64, the handlers read f32/i64."""
    return {"f32": np.float32, "i64": np.int64}[kind]
