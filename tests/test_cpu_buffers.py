"""The CPU handlers keep each thread's row buffers and the absent parameters' constant rows across calls
(cpp/cpu_common.h: RowScratch, ParamRows). Calls that change the row length, an absent parameter's number or the
dtype one after another, and rows longer than the kept buffers (2^20 floats: a buffer of the piece's own), each
against the float64 reference. On a GPU the same calls run its kernels."""

from __future__ import annotations

import jax
import numpy as np
import pytest

import jax_memops as jm
import memops_testing as mt
from memops_testing import DTYPE_IDS, DTYPES, FWD_TOL, GRAD_TOL

KEPT_FLOATS = 1 << 20  # cpu_common.h kKeptFloats


def test_constant_rows_follow_each_call(device, rng):
    """Scalar scale / bias (the constant rows' numbers) and row lengths change from call to call, shorter and longer
    rows in turn: a row kept from an earlier call must never stand in for this one's. A kept row is filled as far as
    a call reads it: the same number over wider rows (C = 100000: column tiles wider than C = 70000's) extends it, and
    a number changed at a narrow row and changed back at a wide one fills it again."""
    for scale, bias, c in ((2.0, 0.5, 300), (-1.0, 0.0, 300), (2.0, 0.5, 5000), (0.25, -3.0, 40), (2.0, 0.5, 5000),
                           (2.0, 0.75, 70000), (2.0, 0.75, 100000), (2.0, 0.75, 300), (2.0, 0.5, 100000)):
        x = mt.randn(rng, (3, c))
        out = jm.scale_bias_gelu(jax.device_put(x, device), scale, bias)
        mt.assert_close(out, mt.ref_scale_bias_gelu(x, scale, bias), FWD_TOL[mt.F32], dtype=mt.F32,
                        mag=mt.ref_scale_bias_gelu_mag(x, scale, bias), what=f"gelu scale={scale} bias={bias} C={c}")
    for c in (50, 70000, 3, 1000):
        x = mt.randn(rng, (4, c), scale=1.5, loc=0.25)
        s = mt.randn(rng, (c,), scale=1.0, loc=1.0)
        b = mt.randn(rng, (c,), scale=1.0)
        xd, sd, bd = (jax.device_put(a, device) for a in (x, s, b))
        for out, ref, what in (
            (jm.layer_norm(xd), mt.ref_layer_norm(x, None, None), "layer_norm, no parameters"),
            (jm.layer_norm(xd, None, bd), mt.ref_layer_norm(x, None, b), "layer_norm, bias only"),
            (jm.layer_norm(xd, sd, None), mt.ref_layer_norm(x, s, None), "layer_norm, scale only"),
            (jm.rms_norm(xd), mt.ref_rms_norm(x, None), "rms_norm, no scale"),
        ):
            mt.assert_close(out, ref, FWD_TOL[mt.F32], dtype=mt.F32, what=f"{what}, C={c}")


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_rows_longer_than_the_kept_buffers(device, rng, dtype):
    """Rows of 2^20 + 3 elements: each piece's buffers and constant rows are its own, forward and backward."""
    c = KEPT_FLOATS + 3
    x = mt.randn(rng, (2, c), dtype, scale=1.5, loc=0.25)
    g = mt.randn(rng, (2, c), dtype, scale=1.0)
    xd, gd = jax.device_put(x, device), jax.device_put(g, device)
    tol = FWD_TOL[dtype]
    mt.assert_close(jm.softmax(xd), mt.ref_softmax(x), tol, dtype=dtype, what="softmax")
    mt.assert_close(jm.layer_norm(xd), mt.ref_layer_norm(x, None, None), tol, dtype=dtype, what="layer_norm")
    mt.assert_close(jm.rms_norm(xd), mt.ref_rms_norm(x, None), tol, dtype=dtype, what="rms_norm")
    mt.assert_close(jm.scale_bias_gelu(xd, 0.5, -0.25), mt.ref_scale_bias_gelu(x, 0.5, -0.25), tol, dtype=dtype,
                    mag=mt.ref_scale_bias_gelu_mag(x, 0.5, -0.25), what="scale_bias_gelu")
    y, vjp = jax.vjp(lambda a: jm.layer_norm(a), xd)
    (dx,) = vjp(gd)
    rdx, _, _ = mt.ref_layer_norm_vjp(x, None, None, 1e-5, g)
    mt.assert_close(dx, rdx, GRAD_TOL[dtype], dtype=dtype, what="layer_norm dx",
                    mag=mt.ref_layer_norm_vjp_mag(x, None, 1e-5, g))
    y, vjp = jax.vjp(lambda a: jm.softmax(a), xd)
    (dx,) = vjp(gd)
    mt.assert_close(dx, mt.ref_softmax_vjp(x, g), GRAD_TOL[dtype], dtype=dtype, what="softmax dx",
                    mag=mt.ref_softmax_vjp_mag(x, g))
    y, vjp = jax.vjp(lambda a: jm.scale_bias_gelu(a, 0.5, -0.25), xd)
    (dx,) = vjp(gd)
    rdx = mt.ref_scale_bias_gelu_vjp(x, 0.5, -0.25, g)[0]
    mt.assert_close(dx, rdx, GRAD_TOL[dtype], dtype=dtype, what="scale_bias_gelu dx",
                    mag=mt.ref_scale_bias_gelu_vjp_mag(x, 0.5, -0.25, g))
