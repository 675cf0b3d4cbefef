"""How every jax_memops custom call partitions over a device mesh (jax.jit on sharded inputs).

A bare custom call is opaque to XLA's partitioner, which gathers its operands onto every device first.
Each primitive is therefore lowered through `jax.experimental.custom_partitioning` (the mechanism JAX's own
cuDNN attention uses): at compile time XLA's partitioner calls `_partition` with the operand shardings,
and each device runs the plain custom call on its shard:

  * leading (row) dims sharded: every ROW/STAT operand and result keeps x's sharding; a PARAM keeps x's
    sharding on its group dims (vmap of batched params) and is replicated otherwise; a GRAD result (the
    sums behind dscale/dbias) is a partial sum per device, psum-ed over the mesh axes that shard the rows
    it sums (the only communication: one all-reduce of C floats), and comes out replicated.
  * last dim sharded: the op's `columns` says what to do (see FfiPrimitive): "local" ops (GELU) run on
    their column blocks; softmax runs a distributed softmax (pmax/psum of per-row max and sum, see
    softmax.py); the norms all-gather the last dim (one warning per op): their kernels' saved
    statistics need whole rows.
  * a dim whose size the mesh does not divide is replicated (padding would enter the row sums).
  * Shardy propagates through the `sharding_rule` (factors of x's dims); GSPMD, if switched back on,
    through `_infer`. Results are also typed with x's sharding (explicit mesh axes) and varying axes.

Why custom_partitioning: `register_ffi_target_as_batch_partitionable` needs every operand and result to
keep x's leading dims (scale and dscale cannot), and a shard_map inside the op needs the mesh at trace
time (plain jit on sharded arrays does not provide it). The costs of a Python callback at compile time:
  * a program on one device (and the per-device body of a shard_map) lowers to the plain custom call:
    jax.export, `lower(lowering_platforms=("cuda",))` and the persistent cache are unaffected;
  * a multi-device program carries a `CustomSPMDPartitioning` call whose key changes per process, so it
    misses the persistent compilation cache (jax_remove_custom_partitioning_ptr_from_cache_key=True
    restores it: the partitioning depends on shapes and shardings only);
  * jax.export of a multi-device program gets the plain custom call instead (correct, but XLA gathers
    the operands; warned once): export a shard_map of the op for communication-free serialized code;
  * the primitives ask JAX for devices during lowering, so device-free lowering (shardings on an
    AbstractMesh only) raises JAX's "AbstractMesh cannot be used ..." error.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import jax
from jax.experimental.custom_partitioning import custom_partitioning
from jax.extend.core import Primitive
from jax.interpreters import mlir
from jax.sharding import AbstractMesh, NamedSharding, PartitionSpec

from . import _primitive as prim  # circular: its names are read at call time only

_warned: set[str] = set()


def _warn_once(key: str, message: str):
    if key not in _warned:
        _warned.add(key)
        warnings.warn(message, stacklevel=2)


def requires_devices(primitive):
    """custom_partitioning needs the devices during lowering; JAX lowers a jit without them unless a
    primitive in the program asks (private API, as JAX's cuDNN ops use it: guarded)."""
    try:
        from jax._src import dispatch

        dispatch.prim_requires_devices_during_lowering.add(primitive)
    except (ImportError, AttributeError):  # pragma: no cover - then multi-device programs gather
        pass


def _padded(spec, ndim) -> tuple:
    """A PartitionSpec's entries, one per dim of an array of rank ndim (a spec may leave trailing dims out)."""
    return (*spec, *(None,) * (ndim - len(spec)))


def aval_like(x, kind, shape, dtype):
    """The type of a result: its sharding follows x's (explicit mesh axes): ROW like x, STAT without the
    last dim, GRAD with x's group dims and last dim. x.update keeps shard_map's varying axes."""
    sharding = getattr(x, "sharding", None)
    if not isinstance(sharding, NamedSharding):
        return jax.core.ShapedArray(shape, dtype)
    spec = _padded(sharding.spec, x.ndim)
    if kind == prim.ROW:
        dims = spec
    elif kind == prim.STAT:
        dims = spec[:-1]
    else:
        dims = (*spec[:len(shape) - 1], spec[-1]) if math.prod(shape) else (None,)
    return x.update(shape=shape, dtype=dtype, weak_type=False,
                    sharding=NamedSharding(sharding.mesh, PartitionSpec(*dims)))


def typed_like(ct, aval):
    """A transpose rule's cotangent with the type of its primal (explicit mesh axes): a parameter's gradient comes
    out of the backward call typed like x (replicated, or split like x's last dim), and JAX requires the parameter's
    own sharding (an FSDP-style split, say). reshard moves at most C floats per parameter."""
    want = getattr(aval, "sharding", None)
    have = getattr(jax.typeof(ct), "sharding", None)
    if not (isinstance(want, NamedSharding) and isinstance(have, NamedSharding)) or want.mesh.empty:
        return ct
    if _padded(want.spec, aval.ndim) == _padded(have.spec, aval.ndim):
        return ct
    return jax.sharding.reshard(ct, want.spec)


def _varying(x) -> frozenset:
    """shard_map's varying manual axes of x (`.vma` up to jax 0.9, `.mat.varying` since)."""
    aval = jax.typeof(x)
    vma = getattr(aval, "vma", None)
    return frozenset(getattr(getattr(aval, "mat", None), "varying", ()) if vma is None else vma)


def match_varying(*arrays):
    """Inside shard_map: every operand gets the union of their varying axes, as JAX's own binary ops do.
    A replicated scale then enters through pcast, whose transpose psums dscale over the devices."""
    union = frozenset().union(*map(_varying, arrays))
    cast = getattr(jax.lax, "pcast", None)
    vary = (lambda a, axes: cast(a, axes, to="varying")) if cast else jax.lax.pvary  # pvary: jax < 0.10
    return tuple(a if _varying(a) == union else vary(a, tuple(sorted(union - _varying(a))))
                 for a in arrays)


def mergeable(x, first: int):
    """(x ready for the reshape that flattens its dims from `first` on into one; a function that gives a result
    of x's shape x's own sharding again). Explicit mesh axes type the reshape, and JAX refuses to merge dims when a
    sharded one follows another (an unsharded row dim before a sharded last dim, say): those dims are then made
    unsharded first (all-gathered, as the norms' kernels gather a sharded last dim) and the result re-split
    afterwards, which moves nothing. The first dim of the group may stay sharded: its blocks stay contiguous."""
    sharding = getattr(jax.typeof(x), "sharding", None)
    spec = _padded(getattr(sharding, "spec", ()), x.ndim)
    if not isinstance(sharding, NamedSharding) or all(e is None for e in spec[first + 1:]):
        return x, lambda y: y
    _warn_once("merge", "jax_memops: the axes of a row are sharded on explicit mesh axes in a way a reshape cannot "
                        "merge; they are all-gathered first")
    gathered = PartitionSpec(*spec[:first], *(None,) * (x.ndim - first))
    return jax.sharding.reshard(x, gathered), lambda y: jax.sharding.reshard(y, PartitionSpec(*spec))


@dataclass(frozen=True)
class _Call:
    """The static part of one custom call, handed to the partitioning callbacks."""
    op: object              # the FfiPrimitive
    params: tuple           # its sorted primitive params
    avals_in: tuple
    avals_out: tuple


def lowering(op):
    """The lowering rule of `op`'s primitive: partitioned on a mesh, the plain custom call otherwise."""
    def rule(ctx, *args, **params):
        context = ctx.module_context.axis_context
        if getattr(ctx.module_context.lowering_parameters, "for_export", False):
            if getattr(context, "num_devices", 1) > 1:
                _warn_once("export", "jax_memops: jax.export of a multi-device program keeps the plain "
                           "custom calls (XLA gathers their operands); export a shard_map of the op to "
                           "serialize communication-free code.")
            return op.lower_plain(ctx, *args, **params)
        if getattr(context, "device_assignment", ()) is None:  # lowered without devices: cannot partition
            return op.lower_plain(ctx, *args, **params)
        call = _Call(op, tuple(sorted(params.items())), tuple(ctx.avals_in), tuple(ctx.avals_out))
        return mlir.lower_fun(lambda *a: _partitioned(call, *a), multiple_results=True)(ctx, *args)
    return rule


def _per_device(call, *args):
    return call.op.per_device(*args, **dict(call.params))


# A partitioned body (_Plan.lower_fn) is one device's program. jax 0.10 traces it with no mesh in context; jax
# 0.11 under the caller's (jax.set_mesh), so with explicit mesh axes its values are typed on that mesh and the
# lowering wraps ops on them in Sharding custom calls that no partitioner will see any more: XLA then fails
# ("No registered implementation for untyped custom call to Sharding", "Unsupported reduction computation"
# in a psum's reducer). The body therefore traces under an empty mesh, its operands retyped by `_device_local`:
# an identity whose result has no mesh (it lowers to nothing).
_NO_MESH = AbstractMesh((), ())
_device_local_p = Primitive("jax_memops_device_local")
_device_local_p.def_abstract_eval(
    lambda x: x.update(sharding=NamedSharding(_NO_MESH, PartitionSpec(*(None,) * x.ndim))))
mlir.register_lowering(_device_local_p, lambda ctx, x: [x])


class _Plan:
    """Shardings of one call's operands and results on `mesh`, from the sharding of x."""

    def __init__(self, call: _Call, mesh, x_sharding):
        self.call, self.mesh = call, mesh
        x = call.avals_in[0]
        named = isinstance(x_sharding, NamedSharding)
        if x_sharding is None:
            _warn_once("undecoded", "jax_memops: operand sharding splits a dim over part of a mesh axis (a dim the "
                                    "mesh does not divide, merged into a row): gathering it.")
        elif not (named or x_sharding.is_fully_replicated):
            # No mesh axis names to psum over (e.g. the automatic axes of a partially manual shard_map).
            _warn_once("unnamed", "jax_memops: operand sharding is not on a named mesh: gathering it.")
        spec = tuple(x_sharding.spec) if named else ()
        spec = [self._axes(a) for a in spec] + [()] * (x.ndim - len(spec))
        # Uneven shards would be padded, and padding would enter the row sums: replicate such dims.
        spec = [axes if n % self._size(axes) == 0 else () for axes, n in zip(spec, x.shape)]
        self.lead, self.cols = spec[:-1], spec[-1]
        if self.cols and call.op.columns is None:
            _warn_once(call.op.target, f"jax_memops: {call.op.target} needs whole rows: all-gathering its "
                       f"last dimension, sharded over mesh axes {self.cols}.")
            self.cols = ()

    @staticmethod
    def _axes(entry) -> tuple[str, ...]:
        return () if entry is None else tuple(entry) if isinstance(entry, (tuple, list)) else (entry,)

    def _size(self, axes) -> int:
        n = 1
        for a in axes:
            n *= self.mesh.shape[a]
        return n

    def _named(self, dims):
        return NamedSharding(self.mesh, PartitionSpec(*(d if d else None for d in dims)))

    def _dims(self, kind, aval):
        if kind == prim.ROW:
            return (*self.lead, self.cols)
        if kind == prim.STAT:
            return tuple(self.lead)
        if aval.size == 0:  # absent PARAM, unwanted GRAD
            return ((),)
        return (*self.lead[:aval.ndim - 1], self.cols)  # group dims like x's, then the columns

    def operands(self):
        return tuple(self._named(self._dims(k, a)) for k, a in zip(self.call.op.spec.operands,
                                                                   self.call.avals_in))

    def results(self):
        return tuple(self._named(self._dims(k, a)) for k, a in zip(self.call.op.spec.results,
                                                                   self.call.avals_out))

    def lower_fn(self, *args):
        op, params = self.call.op, dict(self.call.params)
        with jax.sharding.use_abstract_mesh(_NO_MESH):
            args = tuple(_device_local_p.bind(a) for a in args)
            if self.cols and callable(op.columns):
                outs = op.columns(self.cols, *args, **params)
            else:
                outs = _per_device(self.call, *args)
            # A GRAD result sums rows: add the partial sums of the devices holding its other rows.
            return tuple(jax.lax.psum(o, sum(self.lead[o.ndim - 1:], ())) if kind == prim.GRAD and o.size
                         and any(self.lead[o.ndim - 1:]) else o for kind, o in zip(op.spec.results, outs))


try:  # what custom_partitioning's decode_shardings=True calls (private: without it JAX decodes, as before)
    from jax._src.sharding_impls import parse_flatten_op_sharding as _parse_flatten_op_sharding
except ImportError:  # pragma: no cover
    _parse_flatten_op_sharding = None


def _decoded(sharding, mesh, ndim):
    """x's sharding as XLA hands it over (decode_shardings=False) on `mesh` as a NamedSharding, as JAX would decode
    it, or None where no PartitionSpec of the mesh's axes expresses it. Shardy gives such shardings to the flattened
    rows of `axis=` tuples when x had a dim the mesh does not divide (x (2, 12) split 4 ways on its rows, a row of
    both axes: the merged dim split over part of the axis): JAX's own decoding raised IndivisibleError there, before
    any callback of ours ran. Such an x is gathered."""
    if isinstance(sharding, NamedSharding) or mesh.empty:
        return sharding
    try:
        spec = _parse_flatten_op_sharding(sharding._to_xla_hlo_sharding(ndim), mesh)[0]
    except ValueError:  # IndivisibleError
        return None
    spec = spec.get_partition_spec() if hasattr(spec, "get_partition_spec") else spec  # older jax: a parsed spec
    return NamedSharding(mesh, PartitionSpec(*_padded(spec, ndim)))


def _x_plan(call, mesh, arg_shapes):
    return _Plan(call, mesh, _decoded(arg_shapes[0].sharding, mesh, call.avals_in[0].ndim))


def _partition(call, mesh, arg_shapes, result_shape):
    del result_shape
    plan = _x_plan(call, mesh, arg_shapes)
    return mesh, plan.lower_fn, plan.results(), plan.operands()


def _infer(call, mesh, arg_shapes, result_shape):
    """GSPMD propagation (when Shardy is switched off): results follow x."""
    del result_shape
    return _x_plan(call, mesh, arg_shapes).results()


def _sharding_rule(call, mesh, operand_types, result_types):
    """Shardy propagation: factor b<i> per leading dim of x, c for its last dim, z<j> for empty arrays."""
    del mesh, operand_types, result_types
    ndim = call.avals_in[0].ndim
    lead = [f"b{i}" for i in range(ndim - 1)]
    empty = iter(range(len(call.avals_in) + len(call.avals_out)))

    def dims(kind, aval):
        if kind == prim.ROW:
            return [*lead, "c"]
        if kind == prim.STAT:
            return lead
        return [f"z{next(empty)}"] if aval.size == 0 else [*lead[:aval.ndim - 1], "c"]

    side = lambda kinds, avals: ", ".join(" ".join(dims(k, a)) for k, a in zip(kinds, avals))  # noqa: E731
    spec = call.op.spec
    return f"{side(spec.operands, call.avals_in)} -> {side(spec.results, call.avals_out)}"


_partitioned = custom_partitioning(_per_device, static_argnums=(0,))
_partitioned.def_partition(partition=_partition, infer_sharding_from_operands=_infer,
                           sharding_rule=_sharding_rule, decode_shardings=_parse_flatten_op_sharding is None)
