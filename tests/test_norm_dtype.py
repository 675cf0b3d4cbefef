"""jm.layer_norm / jm.rms_norm with an output dtype other than x's (`dtype=`): the kernels read x as it is and write y
in that dtype, the backward reads dy in it and writes dx in x's. Every pair of the three dtypes against a float64
reference, at row lengths that reach each CUDA kernel class (register rows, unvectorized rows, the row kernels beyond
the registers); transforms, sharding, the lowered program (no conversion pass), the Flax layers, the errors."""

from __future__ import annotations

import itertools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import jax_memops as jm
import memops_testing as mt
from memops_testing import FWD_TOL, GRAD_TOL

PAIRS = [(a, b) for a, b in itertools.permutations(mt.DTYPES, 2)]
PAIR_IDS = [f"{mt.dtype_id(a)}-to-{mt.dtype_id(b)}" for a, b in PAIRS]
# 1, 33: scalar rows; 768, 1000, 2048: 16-byte packs (bf16 x into f32: LayerNorm on the lean team rows, 768 on 6
# packs; f32 x into bf16 on the lean block rows at 3 / 4 packs; the other pairs on v3's rows); 4096: whole packs (f32
# x into bf16: LayerNorm on the lean block rows, RMSNorm's 2 packs on v3's rows); 12289: odd, beyond the unvectorized
# fused backward (its row kernel, the row cache of both dtypes); 24580 / 50001: beyond the f32 / 16-bit forward's
# register rows and the fused backward (the v1 row kernels).
COLS = [1, 33, 768, 1000, 2048, 4096, 12289, 24580, 50001]


@pytest.mark.parametrize("cols", COLS)
@pytest.mark.parametrize("x_dtype,y_dtype", PAIRS, ids=PAIR_IDS)
@pytest.mark.parametrize("op", ["layer_norm", "rms_norm"])
def test_output_dtype(device, rng, op, x_dtype, y_dtype, cols):
    rows = 37 if cols < 4096 else 5
    x = mt.randn(rng, (rows, cols), x_dtype, scale=2.0, loc=0.5)
    s, b = mt.randn(rng, (cols,), loc=1.0), mt.randn(rng, (cols,))
    g = mt.randn(rng, (rows, cols), y_dtype, scale=1.0)
    rms = op == "rms_norm"
    mt.poison(device, (2, rows, cols))
    y, grads = mt.norm_vjp(op, device, x, s, b, g, dtype=y_dtype)
    ry, rdx, rds, rdb, mag = mt.ref_norm_axes(x, s, None if rms else b, (1,), 1e-6 if rms else 1e-5, rms, g)
    assert y.dtype == y_dtype and grads[0].dtype == x_dtype and grads[1].dtype == jnp.float32
    # y is computed in float32 from x as it is: the output's rounding (dtype=y_dtype) is its only error beyond f32's.
    mt.assert_close(y, ry, FWD_TOL[mt.F32] * 10, dtype=y_dtype, what="y")
    mt.assert_close(grads[0], rdx, GRAD_TOL[mt.F32] * 10, dtype=x_dtype, what="dx", mag=mag)
    mt.assert_close(grads[1], rds, GRAD_TOL[mt.F32] * 10, dtype=mt.F32, what="dscale", row_factor=1e9)
    if not rms:
        mt.assert_close(grads[2], rdb, GRAD_TOL[mt.F32] * 10, dtype=mt.F32, what="dbias", row_factor=1e9)


@pytest.mark.parametrize("x_dtype,y_dtype", [(mt.BF16, mt.F32), (mt.F32, mt.BF16)], ids=["bf16-to-f32", "f32-to-bf16"])
@pytest.mark.parametrize("op", ["layer_norm", "rms_norm"])
def test_output_dtype_is_the_rounded_same_dtype_result(device, rng, op, x_dtype, y_dtype):
    """On the CPU, where one kernel serves every dtype: the other dtype's y is the float32 computation rounded once,
    bit for bit (x widened exactly to f32 first, or y of an f32 x rounded to bf16); dx likewise, from dy widened."""
    if device.platform != "cpu":
        pytest.skip("the CUDA kernels differ between dtypes in how they round within float32 (tested above)")
    fn = getattr(jm, op)
    x = jax.device_put(mt.randn(rng, (9, 1000), x_dtype), device)
    s = jax.device_put(mt.randn(rng, (1000,), loc=1.0), device)
    g = jax.device_put(mt.randn(rng, (9, 1000), y_dtype, scale=1.0), device)
    wide = x.astype(jnp.float32)
    y, vjp = jax.vjp(lambda x, s: fn(x, s, dtype=y_dtype), x, s)
    y_ref, vjp_ref = jax.vjp(lambda x, s: fn(x, s), wide, s)
    mt.assert_bitwise_equal(y, y_ref.astype(y_dtype), "y")
    dx, ds = vjp(g)
    dx_ref, ds_ref = vjp_ref(g.astype(jnp.float32))
    mt.assert_bitwise_equal(dx, dx_ref.astype(x_dtype), "dx")
    mt.assert_bitwise_equal(ds, ds_ref, "dscale")


def test_same_dtype_is_the_default(rng):
    """dtype=x.dtype is the call without it: the same program (no y_dtype param), the same bits."""
    x = jnp.asarray(mt.randn(rng, (4, 64), mt.BF16))
    plain = jax.make_jaxpr(lambda x: jm.layer_norm(x))(x)
    assert "y_dtype" not in str(plain)
    assert str(jax.make_jaxpr(lambda x: jm.layer_norm(x, dtype=jnp.bfloat16))(x)) == str(plain)
    assert str(jax.make_jaxpr(lambda x: jm.rms_norm(x, dtype="bfloat16"))(x)) == str(
        jax.make_jaxpr(lambda x: jm.rms_norm(x))(x))


@pytest.mark.parametrize("op", ["layer_norm", "rms_norm"])
def test_no_conversion_pass(op):
    """A bf16 x normalized into f32: the lowered forward and backward convert nothing (x reaches the custom call as
    bf16, dy leaves the forward as f32 and dx comes back as bf16), where widening x first would add a pass."""
    x = jnp.ones((8, 256), jnp.bfloat16)
    s = jnp.ones((256,), jnp.float32)
    fn = getattr(jm, op)
    fwd = jax.jit(lambda x, s: fn(x, s, dtype=jnp.float32)).lower(x, s).as_text()
    assert "convert" not in fwd
    assert re.search(r"custom_call @jax_memops_\w+_fwd\(%\w+, %\w+.*\(tensor<8x256xbf16>", fwd)
    step = jax.jit(jax.grad(lambda x, s: jnp.sum(fn(x, s, dtype=jnp.float32)), argnums=(0, 1))).lower(x, s).as_text()
    bwd = [line for line in step.splitlines() if re.search(r"custom_call @jax_memops_\w+_bwd", line)]
    assert len(bwd) == 1 and "xf32>" in bwd[0] and "-> (tensor<8x256xbf16>" in bwd[0], bwd


@pytest.mark.parametrize("op", ["layer_norm", "rms_norm"])
def test_output_dtype_transforms(device, rng, op):
    """vmap (parameters batched: one row of them per group), forward mode (the tangent in y's dtype), second order,
    and rows over several axes, each against the same computation on x widened to f32 first."""
    fn = getattr(jm, op)
    x = jax.device_put(mt.randn(rng, (3, 7, 129), mt.BF16), device)
    s = jax.device_put(mt.randn(rng, (3, 129), loc=1.0), device)
    tol = dict(rtol=1e-5, atol=1e-5)
    y = jax.vmap(lambda x, s: fn(x, s, dtype=jnp.float32))(x, s)
    y_ref = jax.vmap(lambda x, s: fn(x, s))(x.astype(jnp.float32), s)
    assert y.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(y), np.asarray(y_ref), **tol)
    t = jax.device_put(mt.randn(rng, x.shape, mt.BF16), device)
    _, ty = jax.jvp(lambda x: fn(x, s[0], dtype=jnp.float32), (x,), (t,))
    _, ty_ref = jax.jvp(lambda x: fn(x, s[0]), (x.astype(jnp.float32),), (t.astype(jnp.float32),))
    assert ty.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(ty), np.asarray(ty_ref), rtol=1e-4, atol=1e-4)
    # Second order of an f32 x into f16 (a bf16 x's second-order cotangents are rounded to bf16 at each use of x,
    # where large terms cancel: noise of bf16's precision, with or without `dtype`). The gradient is weighted: a
    # LayerNorm's dx sums to 0 over each row, so the plain sum's second order is rounding noise alone.
    x32 = x.astype(jnp.float32)
    w = jax.device_put(mt.randn(rng, x.shape), device)
    def second(f):
        return jax.grad(lambda x: jnp.sum(jax.grad(lambda x: jnp.sum(f(x).astype(jnp.float32) ** 3))(x) * w))

    h = second(lambda x: fn(x, s[0], dtype=jnp.float16))(x32)
    h_ref = second(lambda x: fn(x, s[0]).astype(jnp.float16))(x32)
    assert h.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(h), np.asarray(h_ref), rtol=1e-2, atol=1e-2 * float(jnp.max(jnp.abs(h_ref))))
    ya = fn(x, s[0].reshape(1, 129) * jnp.ones((7, 1)), axis=(1, 2), dtype=jnp.float32)
    ya_ref = fn(x.astype(jnp.float32), s[0].reshape(1, 129) * jnp.ones((7, 1)), axis=(1, 2))
    assert ya.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(ya), np.asarray(ya_ref), **tol)


@pytest.mark.parametrize("op", ["layer_norm", "rms_norm"])
def test_output_dtype_sharded(rng, op):
    """Rows split over 4 CPU devices: y and dx bitwise those of one device, in their dtypes."""
    fn = getattr(jm, op)
    mesh = jax.make_mesh((4,), ("r",), devices=jax.devices("cpu")[:4])
    x = mt.randn(rng, (16, 96), mt.BF16)
    s = mt.randn(rng, (96,), loc=1.0)
    g = mt.randn(rng, (16, 96), mt.F32, scale=1.0)
    step = jax.jit(lambda x, s, g: (lambda y, vjp: (y, *vjp(g)))(*jax.vjp(lambda x, s: fn(x, s, dtype=jnp.float32),
                                                                        x, s)))
    with jax.default_device(jax.devices("cpu")[0]):  # the reference where the mesh is, also beside a GPU
        ref = step(x, s, g)
    rows = NamedSharding(mesh, P("r"))
    out = step(jax.device_put(x, rows), s, jax.device_put(g, rows))
    assert out[0].dtype == jnp.float32 and out[1].dtype == jnp.bfloat16
    assert out[0].sharding.is_equivalent_to(rows, 2)
    mt.assert_bitwise_equal(out[0], ref[0], "y")
    mt.assert_bitwise_equal(out[1], ref[1], "dx")
    np.testing.assert_allclose(np.asarray(out[2]), np.asarray(ref[2]), rtol=1e-5, atol=1e-5)


def test_empty_output_dtype():
    for op in (jm.layer_norm, jm.rms_norm):
        y = op(jnp.zeros((0, 8), jnp.bfloat16), dtype=jnp.float32)
        assert y.shape == (0, 8) and y.dtype == jnp.float32


@pytest.mark.parametrize("dtype,error,match", [
    ("int8", TypeError, "dtype must be None, float32, bfloat16 or float16, got int8"),
    (np.float64, TypeError, "dtype must be None, float32, bfloat16 or float16, got float64"),
    ("bogus", TypeError, "dtype must be None or a dtype"),
    (3, TypeError, "dtype must be None or a dtype"),
])
@pytest.mark.parametrize("op", ["layer_norm", "rms_norm"])
def test_bad_output_dtype(op, dtype, error, match):
    with pytest.raises(error, match=f"{op}: {re.escape(match)}"):
        getattr(jm, op)(jnp.ones((2, 4)), dtype=dtype)


# -- the handlers' own checks, reached by calling their FFI targets directly with malformed buffers -------------------
def _ffi(target, results, *args, **attrs):
    return jax.jit(lambda *a: jax.ffi.ffi_call(f"jax_memops_{target}", results)(*a, **attrs))(*args)


_EPS = np.float32(1e-5)
_X = np.ones((4, 8), np.float32)
_P = np.ones((8,), np.float32)
_S = jax.ShapeDtypeStruct


@pytest.mark.parametrize("case,match", [
    ("y-size", "y: size must match the input"),
    ("y-int", "unsupported dtype"),
    ("mean-size", "mean must be float32 with one value per row"),
    ("dx-dtype", "dx: dtype and size must match the input"),
    ("dy-size", "dy: size must match the input"),
])
def test_handlers_reject_malformed_buffers(device, case, match):
    """The norm handlers (CPU and CUDA) answer malformed buffers with an error naming the buffer, not a crash: y and dy
    may have another float dtype than x, never another size; dx must be x's."""
    x, p = jax.device_put(_X, device), jax.device_put(_P, device)
    f32, bf16 = jnp.float32, jnp.bfloat16
    stats = _S((4,), f32)
    with pytest.raises(Exception, match=re.escape(match)):
        if case in ("y-size", "y-int", "mean-size"):
            y = {"y-size": _S((4, 7), bf16), "y-int": _S((4, 8), jnp.int32)}.get(case, _S((4, 8), bf16))
            mean = _S((3,), f32) if case == "mean-size" else stats
            jax.block_until_ready(_ffi("layer_norm_fwd", (y, mean, stats), x, p, p, epsilon=_EPS))
        else:
            dy = jax.device_put(np.ones((4, 7) if case == "dy-size" else (4, 8), np.float32), device)
            dx = _S((4, 8), bf16 if case == "dx-dtype" else f32)
            rstd = jax.device_put(np.ones((4,), np.float32), device)
            jax.block_until_ready(_ffi("rms_norm_bwd", (dx, _S((0,), f32), _S((0,), f32)), x, p, rstd, dy))
