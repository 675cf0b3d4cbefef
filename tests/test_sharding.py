"""Sharding (jax_memops/_sharding.py) on meshes of the 8 virtual CPU devices that conftest.py creates.

Every op (forward and VJP: dx, dscale, dbias) on a sharded x must equal the same function on one device,
keep x's sharding (dx like x, dscale/dbias replicated), and communicate only what the op needs: read
from the compiled HLO, no all-gather/all-to-all for row sharding, one small all-reduce for dscale/dbias.
"""

from __future__ import annotations

import functools
import re
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P
from memops_testing import BF16, F32, randn

import jax_memops as jm
from jax_memops import _sharding

SHAPE = (8, 4, 64)  # every dim divisible by every mesh-axis product used below
MESHES = {"8": ((8,), ("a",)), "4x2": ((4, 2), ("a", "b")), "2x2x2": ((2, 2, 2), ("a", "b", "c"))}

# op name -> (fn(x, scale, bias), the parameters it uses, whether it all-gathers a sharded last dim)
OPS = {
    "softmax": (lambda x, s, b: jm.softmax(x), (), False),
    "layer_norm": (lambda x, s, b: jm.layer_norm(x, s, b), ("dscale", "dbias"), True),
    "layer_norm_plain": (lambda x, s, b: jm.layer_norm(x), (), True),
    "rms_norm": (lambda x, s, b: jm.rms_norm(x, s), ("dscale",), True),
    "gelu_numbers": (lambda x, s, b: jm.scale_bias_gelu(x, 1.5, -0.25), (), False),
    "gelu_arrays": (lambda x, s, b: jm.scale_bias_gelu(x, s, b), ("dscale", "dbias"), False),
}
ROW_CASES = [("8", P("a")), ("4x2", P("a", "b")), ("4x2", P(("a", "b"))), ("2x2x2", P("a", ("b", "c"))),
             ("4x2", P("b"))]
COL_CASES = [("8", P(None, None, "a")), ("4x2", P("a", None, "b")), ("2x2x2", P(None, "a", ("b", "c")))]
DTYPES = [pytest.param(F32, id="f32"), pytest.param(BF16, id="bf16")]


def make_mesh(name, axis_type=AxisType.Auto):
    shape, names = MESHES[name]
    devices = jax.devices("cpu")
    if len(devices) < 8:
        pytest.skip("needs 8 CPU devices: XLA_FLAGS=--xla_force_host_platform_device_count=8 before jax")
    return jax.make_mesh(shape, names, axis_types=(axis_type,) * len(shape), devices=devices[:8])


@pytest.fixture(autouse=True)
def _on_cpu():
    """Unsharded references run where the meshes are, on the CPU, also where JAX's default is a GPU."""
    with jax.default_device(jax.devices("cpu")[0]):
        yield


@functools.lru_cache(maxsize=None)
def fwd_bwd(op):
    """(x, scale, bias, dy) -> (y, dx, dscale, dbias), jitted once per op (the unsharded reference
    compiles once per dtype)."""
    fn = OPS[op][0]

    def run(x, s, b, dy):
        y, vjp = jax.vjp(fn, x, s, b)
        return (y, *vjp(dy))

    return jax.jit(run)


def inputs(rng, dtype, shape=SHAPE):
    x = randn(rng, shape, dtype)
    dy = randn(rng, shape, dtype, scale=1.0)
    s = randn(rng, shape[-1:], F32, scale=0.5, loc=1.0)
    b = randn(rng, shape[-1:], F32, scale=0.5)
    return x, s, b, dy


def collectives(compiled_text):
    """{kind: [element counts of each instruction's result]} for the collectives in compiled HLO."""
    found = {}
    for kind in ("all-gather", "all-to-all", "all-reduce", "collective-permute", "reduce-scatter"):
        for lhs in re.findall(rf"=\s*(.*?)\s{kind}(?:-start)?\(", compiled_text):
            sizes = [int(np.prod([int(d) for d in dims.split(",") if d])) for dims in
                     re.findall(r"\[([\d,]*)\]", lhs)]
            found.setdefault(kind, []).append(sum(sizes))
    return found


def check_same(out, ref, exact, dtype):
    for o, r, what in zip(out, ref, ("y", "dx", "dscale", "dbias")):
        o, r = np.asarray(o, np.float64), np.asarray(r, np.float64)
        if exact and what in ("y", "dx"):
            np.testing.assert_array_equal(o, r, err_msg=what)
        else:  # dscale/dbias: partial sums added in another order; distributed softmax: other rounding
            tol = 1e-5 if dtype == F32 or what in ("dscale", "dbias") else 1e-2
            np.testing.assert_allclose(o, r, rtol=tol, atol=tol * np.abs(r).max(), err_msg=what)


def run_sharded(op, mesh, spec, rng, dtype, shape=SHAPE):
    x, s, b, dy = inputs(rng, dtype, shape)
    ref = fwd_bwd(op)(x, s, b, dy)
    xs = jax.device_put(x, NamedSharding(mesh, spec))
    dys = jax.device_put(dy, NamedSharding(mesh, spec))
    out = fwd_bwd(op)(xs, s, b, dys)
    text = fwd_bwd(op).lower(xs, s, b, dys).compile().as_text()
    return xs, out, ref, collectives(text)


def check_layout(xs, out, op):
    """y and dx like x; dscale/dbias replicated over the row axes, split like x's last dim (if it is)."""
    y, dx, ds, db = out
    for a, what in ((y, "y"), (dx, "dx")):
        assert a.sharding.is_equivalent_to(xs.sharding, xs.ndim), f"{what}: {a.sharding} vs {xs.sharding}"
    spec = (*xs.sharding.spec, *(None,) * xs.ndim)[:xs.ndim]
    cols = NamedSharding(xs.sharding.mesh, P(spec[-1]))
    for a, what in ((ds, "dscale"), (db, "dbias")):
        if what in OPS[op][1]:
            assert a.sharding.is_equivalent_to(cols, 1), f"{what}: {a.sharding}, expected {cols}"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mesh_name,spec", ROW_CASES, ids=[f"{m}-{s}" for m, s in ROW_CASES])
@pytest.mark.parametrize("op", OPS)
def test_row_sharded(op, mesh_name, spec, dtype, rng):
    """Rows split on one or two leading dims: each device runs the kernels on its rows; dscale/dbias
    are per-device partial sums joined by one all-reduce of at most 2*C floats."""
    xs, out, ref, found = run_sharded(op, make_mesh(mesh_name), spec, rng, dtype)
    check_same(out, ref, exact=True, dtype=dtype)
    check_layout(xs, out, op)
    assert not {"all-gather", "all-to-all", "collective-permute", "reduce-scatter"} & set(found), found
    reduces = found.get("all-reduce", [])
    assert (len(reduces) > 0) == bool(OPS[op][1]), found
    assert all(n <= 2 * SHAPE[-1] for n in reduces), found


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mesh_name,spec", COL_CASES, ids=[f"{m}-{s}" for m, s in COL_CASES])
@pytest.mark.parametrize("op", OPS)
def test_last_dim_sharded(op, mesh_name, spec, dtype, rng):
    """Softmax: distributed (per-row max and sum all-reduced); GELU: columns are independent; the
    norms: the last dim is all-gathered (and they warn once)."""
    _sharding._warned.clear()
    gathered = OPS[op][2]
    if gathered:
        with pytest.warns(UserWarning, match="all-gathering its last dimension"):
            xs, out, ref, found = run_sharded(op, make_mesh(mesh_name), spec, rng, dtype)
    else:
        xs, out, ref, found = run_sharded(op, make_mesh(mesh_name), spec, rng, dtype)
    check_same(out, ref, exact=op != "softmax", dtype=dtype)
    check_layout(xs, out, op)
    assert "all-to-all" not in found, found
    rows_local = int(np.prod(SHAPE[:-1]))  # softmax all-reduces one float per (local) row
    if gathered:
        assert found.get("all-gather"), found
    else:
        assert "all-gather" not in found, found
        assert all(n <= max(rows_local, 2 * SHAPE[-1]) for n in found.get("all-reduce", [])), found


@pytest.mark.parametrize("op", OPS)
def test_replicated(op, rng):
    """A fully replicated x on a mesh: every device computes everything, no communication at all."""
    xs, out, ref, found = run_sharded(op, make_mesh("8"), P(), rng, F32)
    check_same(out, ref, exact=True, dtype=F32)
    check_layout(xs, out, op)
    assert not found, found


# (x's spec, the parameters' spec) on the 4x2 mesh: FSDP-style parameters split on another axis than x's rows, on the
# axis that splits x's rows, on the axis that splits x's last dim, and replicated beside a split last dim.
PARAM_CASES = [(P("a"), P("b")), (P("a"), P("a")), (P("a", None, "b"), P("a")), (P(None, None, "a"), P())]


@pytest.mark.parametrize("xspec,pspec", PARAM_CASES, ids=["rows-a-params-b", "rows-a-params-a", "cols-b-params-a",
                                                          "cols-a-params-replicated"])
@pytest.mark.parametrize("op", [k for k, v in OPS.items() if v[1]])
def test_explicit_mesh_axes_param_shardings(op, xspec, pspec, rng):
    """Explicit mesh axes: a parameter's gradient has the parameter's own type (JAX checks cotangent types), however
    the parameter is split, as plain jax.numpy code gives; the values equal the unsharded run's."""
    mesh = make_mesh("4x2", AxisType.Explicit)
    x, s, b, dy = inputs(rng, F32)
    ref = fwd_bwd(op)(x, s, b, dy)
    with jax.set_mesh(mesh), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the norms' all-gather of a split last dim
        xs, dys = jax.device_put(x, xspec), jax.device_put(dy, xspec)
        ss, bs = jax.device_put(s, pspec), jax.device_put(b, pspec)
        out = jax.jit(fwd_bwd(op).__wrapped__)(xs, ss, bs, dys)
        for got, want, name in zip(out[2:], (ss, bs), ("dscale", "dbias")):
            if name in OPS[op][1]:
                assert jax.typeof(got).sharding.spec == jax.typeof(want).sharding.spec, name
    check_same(out, ref, exact=False, dtype=F32)


@pytest.mark.parametrize("mesh_name,spec", [ROW_CASES[1], COL_CASES[1]], ids=["rows", "last-dim"])
@pytest.mark.parametrize("op", OPS)
def test_jvp_sharded(op, mesh_name, spec, rng):
    """Forward mode on a sharded x (tangents of x, scale and bias): the tangent equals the one-device
    tangent and is sharded like x; rows stay local (the tangent maps are jax.numpy XLA partitions)."""
    fn = OPS[op][0]
    x, s, b, t = inputs(rng, F32)
    ts, tb = randn(rng, s.shape, F32), randn(rng, b.shape, F32)
    run = jax.jit(lambda p, q: jax.jvp(fn, p, q))
    ref = run((x, s, b), (t, ts, tb))
    sharding = NamedSharding(make_mesh(mesh_name), spec)
    xs, tx = (jax.device_put(a, sharding) for a in (x, t))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the norms' one all-gather warning (last dim)
        out = run((xs, s, b), (tx, ts, tb))
        found = collectives(run.lower((xs, s, b), (tx, ts, tb)).compile().as_text())
    for o, r, what in zip(out, ref, ("y", "tangent")):
        np.testing.assert_allclose(np.asarray(o), np.asarray(r), rtol=1e-5, atol=1e-5 * np.abs(r).max(), err_msg=what)
        assert o.sharding.is_equivalent_to(xs.sharding, x.ndim), f"{what}: {o.sharding}"
    if mesh_name == ROW_CASES[1][0] and spec == ROW_CASES[1][1]:
        assert not found, found


@pytest.mark.parametrize("spec", [P("a", "b"), P("a", None, "b")], ids=["rows", "last-dim"])
@pytest.mark.parametrize("op", OPS)
def test_jvp_explicit_mesh_axes(op, spec, rng):
    """Forward mode with explicit mesh axes: the tangent maps trace with sharded types (LayerNorm's pivot
    is a masked sum, not a slice of a split last dim) and the tangent is typed like x."""
    fn = OPS[op][0]
    x, s, b, t = inputs(rng, F32)
    run = jax.jit(lambda p, q: jax.jvp(fn, p, q))
    ref = run((x, s, b), (t, 0.1 * s, 0.1 * b))
    with jax.set_mesh(make_mesh("4x2", AxisType.Explicit)), warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the norms' one all-gather warning (last dim)
        xs, tx = jax.device_put(x, spec), jax.device_put(t, spec)
        out = run((xs, s, b), (tx, 0.1 * s, 0.1 * b))
        assert jax.typeof(out[1]).sharding.spec == jax.typeof(xs).sharding.spec
    for o, r in zip(out, ref):
        np.testing.assert_allclose(np.asarray(o), np.asarray(r), rtol=1e-5, atol=1e-5 * np.abs(r).max())


OTHER_AXIS = [(0, P(None, None, "a"), True), (1, P("a"), True), (0, P("a"), False)]


@pytest.mark.parametrize("axis,spec,local", OTHER_AXIS, ids=["axis0-rows", "axis1-rows", "axis0-split"])
def test_softmax_other_axis(axis, spec, local, rng):
    """softmax along a non-last axis: sharding another axis stays local; sharding the softmax axis
    itself takes the distributed path (all-reduces of per-row statistics, never an all-gather)."""
    mesh = make_mesh("8")
    x, dy = randn(rng, SHAPE, F32), randn(rng, SHAPE, F32)

    def run(x, dy):
        y, vjp = jax.vjp(lambda x: jm.softmax(x, axis=axis), x)
        return y, *vjp(dy)

    ref = jax.jit(run)(x, dy)
    xs, dys = (jax.device_put(a, NamedSharding(mesh, spec)) for a in (x, dy))
    out = jax.jit(run)(xs, dys)
    for o, r in zip(out, ref):
        np.testing.assert_allclose(np.asarray(o), np.asarray(r), rtol=1e-5, atol=1e-5 * np.abs(r).max())
        assert o.sharding.is_equivalent_to(xs.sharding, x.ndim)
    found = collectives(jax.jit(run).lower(xs, dys).compile().as_text())
    assert "all-gather" not in found and "all-to-all" not in found, found
    assert ("all-reduce" in found) != local, found


@pytest.mark.parametrize("axis_type", [AxisType.Auto, AxisType.Explicit], ids=["auto", "explicit"])
def test_norm_axes_row_sharded(axis_type, rng):
    """The norms over trailing axes (1, 2) with rows split on axis 0: the rows flatten locally, so each device
    runs the kernels on its rows; the three parameter gradients, each of x's shape along those axes, are joined by
    all-reduces of their 3 * 4 * 64 floats in all (XLA may combine them into one)."""
    mesh = make_mesh("8", axis_type)
    x, _, _, dy = inputs(rng, F32)
    s, b = randn(rng, SHAPE[1:], F32, scale=0.5, loc=1.0), randn(rng, SHAPE[1:], F32, scale=0.5)

    def run(x, s, b, dy):
        y, vjp = jax.vjp(lambda x, s, b: jm.layer_norm(x, s, b, axis=(1, 2)), x, s, b)
        r, vjp_r = jax.vjp(lambda x, s: jm.rms_norm(x, s, axis=(-2, -1)), x, s)
        return (y, *vjp(dy), r, *vjp_r(dy))

    ref = jax.jit(run)(x, s, b, dy)
    with jax.set_mesh(mesh):
        xs, dys = (jax.device_put(a, NamedSharding(mesh, P("a"))) for a in (x, dy))
        out = jax.jit(run)(xs, s, b, dys)
        text = jax.jit(run).lower(xs, s, b, dys).compile().as_text()
    for o, r in zip(out, ref):
        np.testing.assert_allclose(np.asarray(o), np.asarray(r), rtol=1e-5, atol=1e-5 * np.abs(r).max())
    for k in (0, 1, 4, 5):  # y, dx of each op like x
        assert out[k].sharding.is_equivalent_to(xs.sharding, x.ndim), (k, out[k].sharding)
    found = collectives(text)
    assert not {"all-gather", "all-to-all", "collective-permute", "reduce-scatter"} & set(found), found
    assert found.get("all-reduce") and sum(found["all-reduce"]) <= 3 * 4 * 64, found


MERGE_CASES = [(P(None, None, "a"), (1, 2)), (P(None, "a", "b"), (1, 2)), (P(None, "a", "b"), (0, 2)),
               (P("a", "b"), None)]


@pytest.mark.parametrize("spec,axis", MERGE_CASES, ids=["last-dim", "both-dims", "moved", "all"])
@pytest.mark.parametrize("op", ["softmax", "layer_norm", "rms_norm"])
def test_axes_on_explicit_mesh_axes(op, spec, axis, rng):
    """Rows of several axes of which a later one is sharded on explicit mesh axes: JAX refuses to merge such dims
    by a plain reshape, so they are gathered first (one warning) and y and dx come back with x's sharding, equal to
    the unsharded results."""
    mesh = make_mesh("4x2", AxisType.Explicit)
    x, _, _, dy = inputs(rng, F32)
    f = {"softmax": lambda x: jm.softmax(x, axis=axis), "layer_norm": lambda x: jm.layer_norm(x, axis=axis),
         "rms_norm": lambda x: jm.rms_norm(x, axis=axis)}[op]

    def run(x, dy):
        y, vjp = jax.vjp(f, x)
        return y, *vjp(dy)

    ref = jax.jit(run)(x, dy)
    _sharding._warned.clear()
    with jax.set_mesh(mesh), warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        xs, dys = (jax.device_put(a, NamedSharding(mesh, spec)) for a in (x, dy))
        out = jax.jit(run)(xs, dys)
        for o in out:
            assert jax.typeof(o).sharding.spec == jax.typeof(xs).sharding.spec
    assert any("cannot merge" in str(w.message) for w in seen), [str(w.message) for w in seen]
    for o, r in zip(out, ref):
        np.testing.assert_allclose(np.asarray(o), np.asarray(r), rtol=1e-5, atol=1e-5 * np.abs(r).max())


@pytest.mark.parametrize("op", OPS)
def test_shard_map(op, rng):
    """Inside shard_map each device makes the plain custom call; grads of replicated parameters are
    summed over the devices by JAX itself (the parameters enter varying through pcast)."""
    mesh = make_mesh("4x2")
    x, s, b, dy = inputs(rng, F32)
    spec = P("a", "b")
    body = fwd_bwd(op).__wrapped__
    fn = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(spec, P(), P(), spec),
                               out_specs=(spec, spec, P(), P())))
    out = fn(x, s, b, dy)
    check_same(out, fwd_bwd(op)(x, s, b, dy), exact=True, dtype=F32)
    lowered = fn.lower(x, s, b, dy)
    assert "jax_memops_" in lowered.as_text() and "CustomSPMDPartitioning" not in lowered.as_text()
    found = collectives(lowered.compile().as_text())
    assert "all-gather" not in found and "all-to-all" not in found, found


@pytest.mark.parametrize("op", OPS)
def test_vmap_inside_shard_map(op, rng):
    """vmap inside shard_map: absent parameters and unwanted gradients keep the varying axes of x."""
    mesh = make_mesh("4x2")
    x, s, b, _ = inputs(rng, F32)
    fn = functools.partial(OPS[op][0], s=s, b=b)

    def body(x):
        dx = jax.vmap(jax.grad(lambda r: jnp.sum(fn(r) * jnp.cos(r))))(x)
        return jax.vmap(fn)(x), dx

    spec = P("a", "b")
    sharded = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=spec, out_specs=(spec, spec)))
    for o, r in zip(sharded(x), jax.jit(body)(x)):
        np.testing.assert_array_equal(np.asarray(o), np.asarray(r))


def test_vmap_over_sharded(rng):
    """vmap on top of a sharded call: per-example scale/bias (row groups) stay sharded like the mapped
    axis of x; their gradients reduce only over the mesh axis sharding the rows within an example."""
    mesh = make_mesh("4x2")
    x, _, _, dy = inputs(rng, F32)
    s = randn(rng, (SHAPE[0], SHAPE[-1]), F32, scale=0.5, loc=1.0)
    b = randn(rng, (SHAPE[0], SHAPE[-1]), F32, scale=0.5)
    per_example = jax.jit(jax.vmap(fwd_bwd("layer_norm").__wrapped__))
    ref = per_example(x, s, b, dy)
    row, grp = NamedSharding(mesh, P("a", "b")), NamedSharding(mesh, P("a"))
    args = (jax.device_put(x, row), jax.device_put(s, grp), jax.device_put(b, grp), jax.device_put(dy, row))
    out = per_example(*args)
    check_same(out, ref, exact=True, dtype=F32)
    assert out[1].sharding.is_equivalent_to(row, 3)
    assert out[2].sharding.is_equivalent_to(grp, 2) and out[3].sharding.is_equivalent_to(grp, 2)
    found = collectives(per_example.lower(*args).compile().as_text())
    local_params = 2 * SHAPE[0] // 4 * SHAPE[-1]  # dscale and dbias of the 2 examples on a device
    assert set(found) == {"all-reduce"} and all(n <= local_params for n in found["all-reduce"]), found
    # shared parameters, nested vmap: still no gather
    inner = jax.vmap(fwd_bwd("rms_norm").__wrapped__, (0, None, None, 0))
    shared = jax.jit(jax.vmap(inner, (0, None, None, 0)))
    s1 = randn(rng, SHAPE[-1:], F32, scale=0.5, loc=1.0)
    out = shared(args[0], s1, s1, args[3])
    check_same(out, shared(x, s1, s1, dy), exact=True, dtype=F32)
    assert "all-gather" not in collectives(shared.lower(args[0], s1, s1, args[3]).compile().as_text())


def test_explicit_mesh_axes(rng):
    """With explicit mesh axes (jax.set_mesh) results are typed with x's sharding at trace time."""
    mesh = make_mesh("4x2", AxisType.Explicit)
    x, s, b, dy = inputs(rng, F32)
    ref = fwd_bwd("layer_norm")(x, s, b, dy)
    with jax.set_mesh(mesh):
        xs, dys = jax.device_put(x, P("a", "b")), jax.device_put(dy, P("a", "b"))
        out = jax.jit(fwd_bwd("layer_norm").__wrapped__)(xs, s, b, dys)
        assert jax.typeof(out[0]).sharding.spec[:2] == ("a", "b")
    check_same(out, ref, exact=True, dtype=F32)
    check_layout(xs, out, "layer_norm")


@pytest.mark.parametrize("mesh_name,spec", [ROW_CASES[1], COL_CASES[1]], ids=["rows", "last-dim"])
@pytest.mark.parametrize("op", OPS)
def test_partitioned_body_traced_on_explicit_mesh(op, mesh_name, spec, rng, monkeypatch):
    """jax 0.11 traces a partitioned body under the caller's mesh context (jax 0.10 without one): with explicit
    mesh axes, no value of one device's program may be typed on the mesh, or its lowering emits Sharding custom
    calls that nothing partitions (XLA then rejects them). Each body this program partitions is traced again
    here as jax 0.11 traces it (make_jaxpr with the mesh's axis env, the explicit abstract mesh in context)."""
    plans = []
    real = _sharding._Plan.lower_fn
    monkeypatch.setattr(_sharding._Plan, "lower_fn", lambda self, *a: plans.append(self) or real(self, *a))
    x, s, b, dy = inputs(rng, F32)
    fn = OPS[op][0]
    # A function of this test's own, so that no cached executable skips the partitioning.
    fresh = jax.jit(lambda *a: (lambda y, vjp: (y, *vjp(a[3])))(*jax.vjp(fn, *a[:3])))
    sharding = NamedSharding(make_mesh(mesh_name), spec)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the norms' gather warning
        out = fresh(jax.device_put(x, sharding), s, b, jax.device_put(dy, sharding))
    check_same(out, fwd_bwd(op)(x, s, b, dy), exact=False, dtype=F32)
    assert plans, "no partitioned body was traced"
    explicit = make_mesh(mesh_name, AxisType.Explicit).abstract_mesh
    for plan in plans[:4]:  # the forward's and the backward's bodies come first
        tiled = [jax.ShapeDtypeStruct(sharding_in.shard_shape(aval.shape), aval.dtype)
                 for sharding_in, aval in zip(plan.operands(), plan.call.avals_in)]
        with jax.sharding.use_abstract_mesh(explicit):
            jaxpr = jax.make_jaxpr(plan.lower_fn, axis_env=list(plan.mesh.shape.items()))(*tiled)
        typed = [(e.primitive.name, v.aval.sharding.mesh) for e in jaxpr.jaxpr.eqns for v in e.outvars
                 if not v.aval.sharding.mesh.empty]
        assert not typed, f"values of one device's program typed on a mesh: {typed[:3]}"


@pytest.mark.parametrize("op", OPS)
def test_single_row_split(op, rng):
    """x of rank 1 (one row) with its only dim split over 8 devices: the statistics are scalars."""
    _sharding._warned.clear()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the norms' gather warning (test_last_dim_sharded checks it)
        xs, out, ref, found = run_sharded(op, make_mesh("8"), P("a"), rng, F32, shape=(64,))
    check_same(out, ref, exact=op != "softmax", dtype=F32)
    check_layout(xs, out, op)
    assert ("all-gather" in found) == OPS[op][2], found


def test_scan_checkpoint_second_order(rng):
    """The ops composed under lax.scan and jax.checkpoint, and a Hessian-vector product, on sharded x."""
    mesh = make_mesh("4x2")
    x, s, b, _ = inputs(rng, F32)

    def loss(x, s, b):
        def body(c, _):
            c = jax.checkpoint(lambda c: jm.scale_bias_gelu(jm.layer_norm(c, s, b), s, b))(c)
            return jm.softmax(c) * 3.0, None

        return jnp.sum(jax.lax.scan(body, x, None, length=3)[0] * jnp.cos(x))

    grads = jax.jit(jax.grad(loss, (0, 1, 2)))
    hvp = jax.jit(lambda x, v: jax.jvp(jax.grad(lambda x: jnp.sum(jm.rms_norm(x, s) ** 3)), (x,), (v,))[1])
    xs = jax.device_put(x, NamedSharding(mesh, P("a", "b")))
    for fn, args, sharded in ((grads, (x, s, b), (xs, s, b)), (hvp, (x, jnp.cos(x)), (xs, jnp.cos(xs)))):
        for o, r in zip(jax.tree.leaves(fn(*sharded)), jax.tree.leaves(fn(*args))):
            np.testing.assert_allclose(np.asarray(o), np.asarray(r), rtol=1e-5, atol=1e-5 * np.abs(r).max())
        found = collectives(fn.lower(*sharded).compile().as_text())
        assert not {"all-gather", "all-to-all"} & set(found), found
    assert grads(xs, s, b)[0].sharding.is_equivalent_to(xs.sharding, 3)


def test_uneven_dims_are_replicated(rng):
    """A dim the mesh does not divide would be padded (padding would enter the row sums): replicated."""
    mesh = make_mesh("8")
    x, s, b, dy = inputs(rng, F32, (6, 4, 64))

    def run(x, s, b, dy):
        x = jax.lax.with_sharding_constraint(x, NamedSharding(mesh, P("a")))
        return fwd_bwd("layer_norm").__wrapped__(x, s, b, dy)

    check_same(jax.jit(run)(x, s, b, dy), fwd_bwd("layer_norm")(x, s, b, dy), exact=True, dtype=F32)
    text = jax.jit(run).lower(x, s, b, dy).compile().as_text()
    calls = re.findall(r"=\s*\((f32\[[\d,]*\])[^\n]*custom-call\(", text)
    assert calls == ["f32[6,4,64]"] * 2, calls  # forward and backward kernels see whole rows of all 6


@pytest.mark.parametrize("axis", [None, (0, 1)], ids=["None", "both"])
@pytest.mark.parametrize("op", ["softmax", "layer_norm", "rms_norm"])
def test_uneven_dims_merged_into_rows(op, axis, rng):
    """A dim the mesh does not divide, merged into the rows of `axis=` (x (2, 64) split 8 ways on its 2 rows): Shardy
    splits the merged dim over part of the mesh axis, which no PartitionSpec expresses; the op gathers x (JAX's own
    decoding of that sharding failed with IndivisibleError inside XLA's partitioner)."""
    mesh = make_mesh("8")
    fn = {"softmax": lambda x: jm.softmax(x, axis=axis), "layer_norm": lambda x: jm.layer_norm(x, axis=axis),
          "rms_norm": lambda x: jm.rms_norm(x, axis=axis)}[op]
    x = randn(rng, (2, 64), F32)
    ref = jax.jit(jax.value_and_grad(lambda x: jnp.sum(jnp.sin(fn(x)))))(x)
    split = lambda x: jax.lax.with_sharding_constraint(x, NamedSharding(mesh, P("a")))  # noqa: E731
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = jax.jit(jax.value_and_grad(lambda x: jnp.sum(jnp.sin(fn(split(x))))))(x)
    for g, r in zip(got, ref):
        np.testing.assert_allclose(np.asarray(g), np.asarray(r), rtol=1e-5, atol=1e-6)


def test_gspmd_propagation(rng):
    """The infer_sharding_from_operands callback, used when Shardy is switched off."""
    try:
        jax.config.update("jax_use_shardy_partitioner", False)
    except (AttributeError, ValueError) as e:
        pytest.skip(f"GSPMD propagation is not available: {e}")
    try:
        xs, out, ref, found = run_sharded("layer_norm", make_mesh("4x2"), P("a", "b"), rng, F32)
    finally:
        jax.config.update("jax_use_shardy_partitioner", True)
    check_same(out, ref, exact=True, dtype=F32)
    check_layout(xs, out, "layer_norm")
    assert set(found) == {"all-reduce"}, found


# -- export and cross-platform lowering --------------------------------------------------------------
def _disabled(op):
    return [jax.export.DisabledSafetyCheck.custom_call(f"jax_memops_{op}_{d}") for d in ("fwd", "bwd")]


def test_export_single_device(rng):
    x, s, b, dy = inputs(rng, F32)
    exp = jax.export.export(fwd_bwd("layer_norm"), platforms=("cpu",), disabled_checks=_disabled("layer_norm"))(
        x, s, b, dy)
    assert "jax_memops_layer_norm_bwd" in exp.mlir_module()
    check_same(exp.call(x, s, b, dy), fwd_bwd("layer_norm")(x, s, b, dy), exact=True, dtype=F32)


def test_export_needs_disabled_checks(rng):
    x, s, b, dy = inputs(rng, F32)
    with pytest.raises(ValueError, match="jax_memops_layer_norm"):
        jax.export.export(fwd_bwd("layer_norm"))(x, s, b, dy)


def test_export_multi_device_keeps_plain_calls(rng):
    """custom_partitioning's callback cannot be serialized: export keeps the plain custom calls (XLA
    gathers their operands; correct) and warns; a shard_map of the op exports communication-free."""
    _sharding._warned.clear()
    mesh = make_mesh("4x2")
    x, s, b, dy = inputs(rng, F32)
    row, rep = NamedSharding(mesh, P("a", "b")), NamedSharding(mesh, P())
    fn = jax.jit(fwd_bwd("layer_norm").__wrapped__, in_shardings=(row, rep, rep, row))
    with pytest.warns(UserWarning, match="export a shard_map"):
        exp = jax.export.export(fn, platforms=("cpu",), disabled_checks=_disabled("layer_norm"))(x, s, b, dy)
    assert "CustomSPMDPartitioning" not in exp.mlir_module()
    ref = fwd_bwd("layer_norm")(x, s, b, dy)
    check_same(exp.call(jax.device_put(x, row), s, b, jax.device_put(dy, row)), ref, exact=True, dtype=F32)

    body = jax.shard_map(fwd_bwd("layer_norm").__wrapped__, mesh=mesh, in_specs=(P("a", "b"), P(), P(),
                         P("a", "b")), out_specs=(P("a", "b"), P("a", "b"), P(), P()))
    exp = jax.export.export(jax.jit(body), platforms=("cpu",), disabled_checks=_disabled("layer_norm"))(x, s, b, dy)
    args = (jax.device_put(x, row), s, b, jax.device_put(dy, row))
    check_same(exp.call(*args), ref, exact=True, dtype=F32)
    found = collectives(jax.jit(exp.call).lower(*args).compile().as_text())
    assert "all-gather" not in found and "all-to-all" not in found, found


def test_device_free_export_is_refused():
    """The partitioning callback needs real devices while lowering: shardings on an AbstractMesh only
    (device-free export) get JAX's error, before anything is lowered."""
    mesh = jax.sharding.AbstractMesh((4, 2), ("a", "b"), axis_types=(AxisType.Explicit,) * 2)
    x = jax.ShapeDtypeStruct(SHAPE, jnp.float32, sharding=NamedSharding(mesh, P("a", "b")))
    with jax.sharding.use_abstract_mesh(mesh), pytest.raises(ValueError, match="require devices"):
        jax.export.export(jax.jit(jm.softmax), platforms=("cuda",), disabled_checks=_disabled("softmax"))(x)


def test_cuda_lowering_of_sharded_program(rng):
    """From this CPU machine: a multi-device program lowers for CUDA with the partitioning call (the
    jax_memops targets appear when XLA partitions it); a shard_map body shows them directly."""
    if not jm.build_info()["cuda"]:
        pytest.skip("jax_memops built without CUDA kernels")
    mesh = make_mesh("4x2")
    x, s, b, dy = inputs(rng, F32)
    row = NamedSharding(mesh, P("a", "b"))
    xs, dys = jax.device_put(x, row), jax.device_put(dy, row)
    text = fwd_bwd("rms_norm").trace(xs, s, b, dys).lower(lowering_platforms=("cuda",)).as_text()
    assert "CustomSPMDPartitioning" in text
    body = jax.shard_map(fwd_bwd("rms_norm").__wrapped__, mesh=mesh, in_specs=(P("a", "b"), P(), P(),
                         P("a", "b")), out_specs=(P("a", "b"), P("a", "b"), P(), P()))
    text = jax.jit(body).trace(xs, s, b, dys).lower(lowering_platforms=("cuda",)).as_text()
    assert "jax_memops_rms_norm_fwd" in text and "jax_memops_rms_norm_bwd" in text


# -- real GPUs (skipped here): the same checks on a mesh of every visible GPU --------------------------
def _gpus():
    try:
        return jax.devices("gpu")
    except RuntimeError:
        return []


@pytest.mark.gpu
@pytest.mark.parametrize("spec", [P("g"), P(None, None, "g")], ids=["rows", "last-dim"])
@pytest.mark.parametrize("op", OPS)
def test_gpu_mesh(op, spec, rng):
    gpus = _gpus()
    if len(gpus) < 2 or not jm.build_info()["cuda"]:
        pytest.skip("needs 2 or more GPUs and jax_memops built with CUDA")
    n = 2 ** (min(len(gpus), 8).bit_length() - 1)  # a power of two dividing SHAPE's dims
    mesh = jax.make_mesh((n,), ("g",), axis_types=(AxisType.Auto,), devices=gpus[:n])
    _sharding._warned.clear()
    with jax.default_device(gpus[0]):
        xs, out, ref, found = run_sharded(op, mesh, spec, rng, F32)
    check_same(out, ref, exact=False, dtype=F32)  # GPU reductions may differ with the launch shape
    check_layout(xs, out, op)
    assert "all-to-all" not in found, found
    assert ("all-gather" in found) == (spec != P("g") and OPS[op][2]), found
