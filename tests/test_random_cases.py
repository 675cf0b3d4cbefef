"""Seeded random sweeps over the combinations the other tests pick by hand: shapes of rank 1-4 (now and then one long
axis), every dtype, every form of `axis` (an int, a tuple, a list with negative entries, None, ()), with and without
parameters, the norms' output dtype (`dtype`); and the same ops on random meshes, partition specs and axis types
against one device. Each case draws its own inputs; a failure names the case (the seed makes it reproducible).

The rows-of-several-axes reshape on explicit mesh axes (`_sharding.mergeable`) is the kind of bug these find: JAX
refused it at trace time for layouts no hand-written case had."""

from __future__ import annotations

import warnings

import jax
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

import jax_memops as jm
import memops_testing as mt

OPS = ("softmax", "layer_norm", "rms_norm")
CHUNKS = 6  # parametrized chunks of cases, so that xdist spreads them
CASES = 25  # per chunk


def _draw_axis(rng, nd):
    """(the axis argument in one of its forms, the sorted axes it names)."""
    axes = tuple(sorted(rng.choice(nd, int(rng.integers(0, nd + 1)), replace=False).tolist()))
    form = int(rng.integers(4))
    if form == 0 and len(axes) == nd:
        return None, axes
    if form == 1 and len(axes) == 1:
        return axes[0] - nd * int(rng.integers(2)), axes
    if form == 2:
        return [a - nd if rng.random() < 0.5 else a for a in axes], axes
    return axes, axes


def _call(op, x, s, b, axis, y_dtype=None):
    if op == "softmax":
        return jm.softmax(x, axis=axis)
    if op == "layer_norm":
        return jm.layer_norm(x, s, b, axis=axis, dtype=y_dtype)
    return jm.rms_norm(x, s, axis=axis, dtype=y_dtype)


def _ref(op, x, s, b, axes, g):
    """(y, dx, the magnitude of dx's terms) in float64 over `axes`."""
    if op == "softmax":
        return mt.ref_softmax(x, axes), mt.ref_softmax_vjp(x, g, axes), mt.ref_softmax_vjp_mag(x, g, axes)
    rms = op == "rms_norm"
    y, dx, _, _, mag = mt.ref_norm_axes(x, s, None if rms else b, axes, 1e-6 if rms else 1e-5, rms, g)
    return y, dx, mag


@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_random_ops(device, chunk):
    rng = np.random.default_rng(1000 + chunk)
    for case in range(CASES):
        nd = int(rng.integers(1, 5))
        shape = [int(d) for d in rng.integers(1, 8, nd)]
        if rng.random() < 0.25:
            shape[int(rng.integers(nd))] = int(rng.integers(30, 5000))
        shape = tuple(shape)
        dtype = mt.DTYPES[int(rng.integers(len(mt.DTYPES)))]
        op = OPS[int(rng.integers(len(OPS)))]
        axis, axes = _draw_axis(rng, nd)
        pshape = tuple(shape[a] for a in axes)
        s = mt.randn(rng, pshape, loc=1.0) if op != "softmax" and rng.random() < 0.7 else None
        b = mt.randn(rng, pshape) if op == "layer_norm" and rng.random() < 0.7 else None
        x = mt.randn(rng, shape, dtype, scale=2.0, loc=0.5)
        # the norms' output dtype: x's (None) or, a third of the time, any of the three (`dtype`; dy in it)
        y_dtype = mt.DTYPES[int(rng.integers(len(mt.DTYPES)))] if op != "softmax" and rng.random() < 1 / 3 else None
        out = dtype if y_dtype is None else y_dtype
        g = mt.randn(rng, shape, dtype, scale=1.0).astype(out)
        what = f"chunk {chunk} case {case}: {op} {shape} {np.dtype(dtype).name} axis={axis!r} out {np.dtype(out).name}"
        mt.poison(device, (2,) + shape)
        y, (dx,) = jax.jit(lambda t, g: (lambda y, vjp: (y, vjp(g)))(*jax.vjp(
            lambda t: _call(op, t, s, b, axis, y_dtype), t)))(jax.device_put(x, device), jax.device_put(g, device))
        assert y.shape == dx.shape == shape and y.dtype == out and dx.dtype == x.dtype, what
        ry, rdx, mag = _ref(op, x, s, b, axes, g)
        tol = max(mt.FWD_TOL[dtype], mt.FWD_TOL[out]), max(mt.GRAD_TOL[dtype], mt.GRAD_TOL[out])
        mt.assert_close(mt.as_rows(y, axes), mt.as_rows(ry, axes), tol[0], dtype=out, what=what + " y")
        mt.assert_close(mt.as_rows(dx, axes), mt.as_rows(rdx, axes), tol[1], dtype=dtype, what=what + " dx",
                        mag=mt.as_rows(mag, axes))


MESHES = {"8": ((8,), ("a",)), "4x2": ((4, 2), ("a", "b")), "2x2x2": ((2, 2, 2), ("a", "b", "c"))}


def _draw_spec(rng, shape, mesh):
    """A partition spec of x: each mesh axis on at most one dim, where the dim's size stays divisible."""
    spec = [()] * len(shape)
    for name in mesh.axis_names:
        if rng.random() < 0.6:
            d = int(rng.integers(len(shape)))
            if shape[d] % (int(np.prod([mesh.shape[n] for n in spec[d]])) * mesh.shape[name]) == 0:
                spec[d] = spec[d] + (name,)
    return P(*(None if not e else e[0] if len(e) == 1 else e for e in spec))


@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_random_sharded(chunk):
    """y, dx, dscale, dbias on a sharded x equal one device's; on explicit axes y and dx are typed with x's sharding."""
    devices = jax.devices("cpu")
    if len(devices) < 8:
        pytest.skip("needs 8 CPU devices: XLA_FLAGS=--xla_force_host_platform_device_count=8 before jax")
    rng = np.random.default_rng(2000 + chunk)
    with jax.default_device(devices[0]), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the norms' gathers of a sharded row warn once each
        for case in range(CASES):
            kind = (AxisType.Auto, AxisType.Explicit)[int(rng.integers(2))]
            shape_, names = MESHES[list(MESHES)[int(rng.integers(len(MESHES)))]]
            mesh = jax.make_mesh(shape_, names, axis_types=(kind,) * len(shape_), devices=devices[:8])
            shape = tuple(int(d) for d in rng.choice([2, 4, 8, 16], int(rng.integers(1, 4))))
            spec = _draw_spec(rng, shape, mesh)
            op = OPS[int(rng.integers(len(OPS)))]
            axes = tuple(sorted(rng.choice(len(shape), int(rng.integers(1, len(shape) + 1)), replace=False).tolist()))
            pshape = tuple(shape[a] for a in axes)
            x, dy = mt.randn(rng, shape), mt.randn(rng, shape, scale=1.0)
            s, b = mt.randn(rng, pshape, loc=1.0), mt.randn(rng, pshape)

            def run(x, s, b, dy):
                y, vjp = jax.vjp(lambda x, s, b: _call(op, x, s, b, axes), x, s, b)
                return (y, *vjp(dy))

            what = f"chunk {chunk} case {case}: {op} {shape} axes {axes} on {kind} {dict(mesh.shape)} {spec}"
            ref = jax.jit(run)(x, s, b, dy)
            with jax.set_mesh(mesh):
                xs, dys = (jax.device_put(a, NamedSharding(mesh, spec)) for a in (x, dy))
                out = jax.jit(run)(xs, s, b, dys)
                if kind == AxisType.Explicit:
                    for k in (0, 1):
                        assert jax.typeof(out[k]).sharding.spec == jax.typeof(xs).sharding.spec, what
            for o, r, name in zip(out, ref, ("y", "dx", "dscale", "dbias")):
                r = np.asarray(r, np.float64)
                np.testing.assert_allclose(np.asarray(o, np.float64), r, rtol=1e-5, atol=1e-5 * np.abs(r).max(),
                                           err_msg=f"{what}: {name}")
