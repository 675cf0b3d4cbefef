"""The fusion experiment's unfused pieces (jax_memops.unfused): scale, bias, gelu, each its own kernel and
custom call, against float64 references; chained they equal the fused scale_bias_gelu up to the extra
roundings of their intermediates. The bench's device copy (unfused.copy) returns x bit for bit."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_memops as jm
import memops_testing as mt
from jax_memops import unfused
from memops_testing import DTYPE_IDS, DTYPES, FWD_TOL

SIZES = [(1,), (7,), (1000,), (4097,), (3, 50257), (2, 3, 31)]


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("shape", SIZES, ids=["x".join(map(str, s)) for s in SIZES])
def test_pieces_match_float64(device, rng, shape, dtype):
    x = mt.randn(rng, shape, dtype)
    s, b = float(rng.uniform(0.5, 2.0)), float(rng.normal())
    xd = jax.device_put(jnp.asarray(x), device)
    x64 = mt.f64(x)
    cases = {
        "scale": (jax.jit(lambda v: unfused.scale(v, s))(xd), x64 * np.float32(s)),
        "bias": (jax.jit(lambda v: unfused.bias(v, b))(xd), x64 + np.float32(b)),
        "gelu": (jax.jit(unfused.gelu)(xd), mt.ref_gelu(x64)),
    }
    for name, (got, want) in cases.items():
        assert got.dtype == x.dtype and got.shape == x.shape, name
        mt.assert_close(got, want, FWD_TOL[dtype], dtype=dtype, what=name)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_three_kernels_equal_the_fused_op(device, rng, dtype):
    x = jax.device_put(jnp.asarray(mt.randn(rng, (5, 333), dtype)), device)
    chain = jax.jit(lambda v: unfused.three_kernels(v, 1.5, 0.25))(x)
    fused = jax.jit(lambda v: jm.scale_bias_gelu(v, 1.5, 0.25))(x)
    # The chain rounds u = x*s and u + b to the dtype; the fused kernel keeps them in float32.
    mt.assert_close(chain, mt.f64(fused), 4 * FWD_TOL[dtype], dtype=dtype, what="three kernels")


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("shape", SIZES + [(0, 5)], ids=["x".join(map(str, s)) for s in SIZES + [(0, 5)]])
def test_copy_returns_x_bitwise(device, rng, shape, dtype):
    """NaN, infinities and signed zeros too: the copy moves bytes, it does no arithmetic."""
    x = mt.randn(rng, shape, dtype)
    if x.size >= 4:
        x.flat[:4] = [np.nan, np.inf, -np.inf, -0.0]
    y = jax.jit(unfused.copy)(jax.device_put(jnp.asarray(x), device))
    assert y.dtype == x.dtype and y.shape == x.shape and list(y.devices()) == [device]
    assert np.asarray(y).tobytes() == x.tobytes()
    text = jax.jit(unfused.copy).lower(jnp.ones((4, 8))).as_text()
    assert re.findall(r"custom_call @(\w+)", text) == ["jax_memops_copy"]


def test_three_kernels_are_three_custom_calls():
    text = jax.jit(lambda v: unfused.three_kernels(v, 1.5, 0.25)).lower(jnp.ones((4, 8))).as_text()
    calls = re.findall(r"custom_call @(\w+)", text)
    assert calls == ["jax_memops_scale", "jax_memops_bias", "jax_memops_gelu"]


def test_pieces_reject_bad_input():
    with pytest.raises(TypeError, match="float32, bfloat16 or float16"):
        unfused.scale(jnp.ones(3, jnp.int32), 2.0)
    with pytest.raises(ValueError, match="rank"):
        unfused.gelu(jnp.float32(1.0))
