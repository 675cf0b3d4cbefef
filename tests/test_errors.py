"""Argument errors: raised from Python before lowering (also under jit / eval_shape, i.e. at trace
time), of the right type, with a message that names the argument and what was expected."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_memops as jm

C = 8

OPS = {
    "softmax": lambda x: jm.softmax(x),
    "layer_norm": lambda x: jm.layer_norm(x),
    "rms_norm": lambda x: jm.rms_norm(x),
    "scale_bias_gelu": lambda x: jm.scale_bias_gelu(x),
}
OPS_WITH_PARAMS = {
    "softmax": lambda x: jm.softmax(x, -1),
    "layer_norm": lambda x: jm.layer_norm(x, jnp.ones(x.shape[-1:]), jnp.zeros(x.shape[-1:])),
    "rms_norm": lambda x: jm.rms_norm(x, jnp.ones(x.shape[-1:])),
    "scale_bias_gelu": lambda x: jm.scale_bias_gelu(x, jnp.ones(x.shape[-1:]), jnp.zeros(x.shape[-1:])),
}


def _raises_everywhere(fn, args, exc, match=None):
    """The error comes eagerly, under jit and under eval_shape (abstract tracing only: no lowering)."""
    with pytest.raises(exc, match=match) as e1:
        fn(*args)
    with pytest.raises(exc, match=match):
        jax.jit(fn)(*args)
    with pytest.raises(exc, match=match):
        jax.eval_shape(fn, *args)
    return str(e1.value)


def _mentions_dtypes(msg):
    m = msg.lower()
    return "float32" in m and "bfloat16" in m and "float16" in m.replace("bfloat16", "")


# ----------------------------------------------------------------------------------------------
# rank-0 input
# ----------------------------------------------------------------------------------------------


RANK0_CASES = {
    "softmax": lambda x: jm.softmax(x),
    "softmax-axis0": lambda x: jm.softmax(x, 0),
    "layer_norm": lambda x: jm.layer_norm(x),
    "layer_norm-params": lambda x: jm.layer_norm(x, jnp.ones(1), jnp.zeros(1)),
    "rms_norm": lambda x: jm.rms_norm(x),
    "rms_norm-scale": lambda x: jm.rms_norm(x, jnp.ones(1)),
    "scale_bias_gelu": lambda x: jm.scale_bias_gelu(x),
    "scale_bias_gelu-numbers": lambda x: jm.scale_bias_gelu(x, 2.0, 1.0),
}


@pytest.mark.parametrize("case", list(RANK0_CASES))
def test_rank0_is_value_error(case):
    msg = _raises_everywhere(RANK0_CASES[case], (jnp.float32(1.5),), ValueError)
    assert re.search(r"\bx\b", msg) or "rank" in msg.lower() or "scalar" in msg.lower(), msg


# ----------------------------------------------------------------------------------------------
# dtypes
# ----------------------------------------------------------------------------------------------

BAD_DTYPES = [np.int32, np.int8, np.uint8, np.bool_, np.complex64]


@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("dtype", BAD_DTYPES, ids=lambda d: np.dtype(d).name)
def test_unsupported_dtype_is_type_error(op, dtype):
    x = jnp.asarray(np.ones((3, C)).astype(dtype))
    msg = _raises_everywhere(OPS[op], (x,), TypeError)
    assert _mentions_dtypes(msg), f"message should name the supported dtypes: {msg!r}"


@pytest.mark.parametrize("op", list(OPS))
def test_float64_is_type_error(op):
    with jax.enable_x64(True):
        x = jnp.ones((3, C), jnp.float64)
        assert x.dtype == jnp.float64
        msg = _raises_everywhere(OPS[op], (x,), TypeError)
    assert _mentions_dtypes(msg), msg


@pytest.mark.parametrize("op", list(OPS))
def test_numpy_float64_and_int_inputs(op):
    """NumPy float64 data (x64 off) is canonicalized like any JAX input or rejected with TypeError;
    NumPy int data is rejected with TypeError."""
    with pytest.raises(TypeError) as e:
        OPS[op](np.ones((3, C), np.int64))
    assert _mentions_dtypes(str(e.value))
    try:
        out = OPS[op](np.ones((3, C), np.float64))
    except TypeError as err:
        assert _mentions_dtypes(str(err))
    else:
        assert out.dtype == jnp.float32 and out.shape == (3, C)


# ----------------------------------------------------------------------------------------------
# softmax: algorithm, axis
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("algorithm", ["bogus", "", "AUTO", None, 0])
def test_softmax_unknown_algorithm(algorithm):
    x = jnp.ones((2, C))
    with pytest.raises((ValueError, TypeError)) as e:
        jm.softmax(x, algorithm=algorithm)
    if isinstance(algorithm, str):
        assert e.type is ValueError
        msg = _raises_everywhere(lambda t: jm.softmax(t, algorithm=algorithm), (x,), ValueError)
        assert "algorithm" in msg
        for name in jm.SOFTMAX_ALGORITHMS:
            assert name in msg, f"message should list valid algorithm {name!r}: {msg!r}"


def test_softmax_algorithm_is_keyword_only():
    with pytest.raises(TypeError):
        jm.softmax(jnp.ones((2, C)), -1, "auto")


@pytest.mark.parametrize("shape,axis", [((2, C), 2), ((2, C), -3), ((C,), 1), ((C,), -2), ((2, 3, C), 3), ((2, 3, C), 100)])
def test_softmax_axis_out_of_range(shape, axis):
    msg = _raises_everywhere(lambda t: jm.softmax(t, axis), (jnp.ones(shape),), ValueError)
    assert "axis" in msg, msg


@pytest.mark.parametrize("axis", [1.0, 0.5, "1", (0, 1.0), ("a",), [0, None]],
                         ids=["1.0", "0.5", "str", "tuple-float", "tuple-str", "list-none"])
def test_softmax_axis_not_int(axis):
    msg = _raises_everywhere(lambda t: jm.softmax(t, axis), (jnp.ones((2, 3, C)),), TypeError)
    assert "axis" in msg and "tuple of ints" in msg, msg


@pytest.mark.parametrize("axis,what", [((0, 3), "out of range"), ((1, -2), "twice"), ((2, 2), "twice"),
                                       ([-4], "out of range")], ids=["range", "twice-neg", "twice", "list-range"])
def test_softmax_axes_bad_value(axis, what):
    msg = _raises_everywhere(lambda t: jm.softmax(t, axis), (jnp.ones((2, 3, C)),), ValueError)
    assert "axis" in msg and what in msg, msg


@pytest.mark.parametrize("where", [np.ones((3, C), bool), np.ones((2, C + 1), bool), np.ones((C,), bool)[:-1]],
                         ids=["rows", "cols", "short"])
def test_softmax_where_shape(where):
    msg = _raises_everywhere(lambda t: jm.softmax(t, where=where), (jnp.ones((2, C)),), ValueError)
    assert "where" in msg and "(2, %d)" % C in msg, msg


@pytest.mark.parametrize("where", ["mask", object(), np.array(["a"] * C)], ids=["str", "object", "str-array"])
def test_softmax_where_type(where):
    with pytest.raises(TypeError) as e:
        jm.softmax(jnp.ones((2, C)), where=where)
    assert "where" in str(e.value), str(e.value)


def test_softmax_numpy_int_axis_ok():
    x = jnp.asarray(np.random.default_rng(0).standard_normal((3, C)), jnp.float32)
    np.testing.assert_allclose(np.asarray(jm.softmax(x, np.int64(0))), np.asarray(jax.nn.softmax(x, axis=0)), rtol=1e-5)


# ----------------------------------------------------------------------------------------------
# norms: scale / bias shapes
# ----------------------------------------------------------------------------------------------

BAD_PARAM_SHAPES = [(C + 1,), (C - 1,), (1, C), (C, 1), (2, C), (), (1,)]
BAD_IDS = ["x".join(map(str, s)) or "scalar" for s in BAD_PARAM_SHAPES]


@pytest.mark.parametrize("which", ["scale", "bias"])
@pytest.mark.parametrize("shape", BAD_PARAM_SHAPES, ids=BAD_IDS)
def test_layer_norm_bad_param_shape(which, shape):
    x = jnp.ones((3, C))
    good = jnp.ones((C,))
    bad = jnp.ones(shape)
    kw = {"scale": good, "bias": good, which: bad}
    msg = _raises_everywhere(lambda t, s, b: jm.layer_norm(t, s, b), (x, kw["scale"], kw["bias"]), ValueError)
    assert which in msg, f"message should name {which!r}: {msg!r}"
    assert str(C) in msg, f"message should say the expected size {C}: {msg!r}"


@pytest.mark.parametrize("shape", BAD_PARAM_SHAPES, ids=BAD_IDS)
def test_rms_norm_bad_scale_shape(shape):
    x = jnp.ones((3, C))
    msg = _raises_everywhere(lambda t, s: jm.rms_norm(t, s), (x, jnp.ones(shape)), ValueError)
    assert "scale" in msg and str(C) in msg, msg


@pytest.mark.parametrize("which", ["scale", "bias"])
@pytest.mark.parametrize("shape", [s for s in BAD_PARAM_SHAPES if s != ()], ids=[i for s, i in zip(BAD_PARAM_SHAPES, BAD_IDS) if s != ()])
def test_gelu_bad_param_shape(which, shape):
    x = jnp.ones((3, C))
    other = jnp.ones((C,))
    bad = jnp.ones(shape)
    args = (x, bad, other) if which == "scale" else (x, other, bad)
    msg = _raises_everywhere(lambda t, s, b: jm.scale_bias_gelu(t, s, b), args, ValueError)
    assert which in msg, f"message should name {which!r}: {msg!r}"


@pytest.mark.parametrize("which", ["scale", "bias"])
def test_gelu_bad_param_shape_with_number_other(which):
    x = jnp.ones((3, C))
    bad = jnp.ones((C + 1,))
    fn = (lambda t, p: jm.scale_bias_gelu(t, p, 0.5)) if which == "scale" else (lambda t, p: jm.scale_bias_gelu(t, 2.0, p))
    msg = _raises_everywhere(fn, (x, bad), ValueError)
    assert which in msg, msg


@pytest.mark.parametrize("which", ["scale", "bias"])
def test_gelu_scalar_array_not_float(which):
    """A scalar array is one value for every column, but, as for (C,) arrays, of a floating dtype."""
    x = jnp.ones((3, C))
    fn = (lambda t, p: jm.scale_bias_gelu(t, p, 0.5)) if which == "scale" else (lambda t, p: jm.scale_bias_gelu(t, 2.0, p))
    msg = _raises_everywhere(fn, (x, jnp.asarray(2, jnp.int32)), TypeError)
    assert which in msg and "floating" in msg, msg


NOT_ARRAYS = {"str": "abc", "bytes": b"abc", "object": object()}
PARAM_CALLS = {
    "layer_norm-scale": (lambda x, p: jm.layer_norm(x, p), "scale"),
    "layer_norm-bias": (lambda x, p: jm.layer_norm(x, None, p), "bias"),
    "rms_norm-scale": (lambda x, p: jm.rms_norm(x, p), "scale"),
    "scale_bias_gelu-scale": (lambda x, p: jm.scale_bias_gelu(x, p, 0.5), "scale"),
    "scale_bias_gelu-bias": (lambda x, p: jm.scale_bias_gelu(x, 2.0, p), "bias"),
    "softmax-where": (lambda x, p: jm.softmax(x, where=p), "where"),
}


@pytest.mark.parametrize("call", list(PARAM_CALLS))
@pytest.mark.parametrize("kind", list(NOT_ARRAYS))
def test_param_not_an_array_names_it(call, kind):
    """A parameter that is no array at all (text, an arbitrary object) is a TypeError naming the op and that
    parameter, as a wrong dtype or shape is, not NumPy's or JAX's own message."""
    fn, name = PARAM_CALLS[call]
    op = call.split("-")[0]
    with pytest.raises(TypeError) as e:
        fn(jnp.ones((3, C)), NOT_ARRAYS[kind])
    msg = str(e.value)
    assert msg.startswith(f"{op}: {name} must be"), msg
    assert kind in msg or repr(NOT_ARRAYS[kind]) in msg, msg


@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("kind", list(NOT_ARRAYS))
def test_x_not_an_array_names_it(op, kind):
    with pytest.raises(TypeError) as e:
        OPS[op](NOT_ARRAYS[kind])
    assert str(e.value).startswith(f"{op}: x must be an array, got {kind}"), str(e.value)


def test_norm_params_on_multi_dim_input_use_last_axis():
    """scale of shape (C,) matches the last axis even when x is 4-D; a shape matching another axis is rejected."""
    x = jnp.ones((2, 3, 5, C))
    jm.layer_norm(x, jnp.ones(C), jnp.ones(C))
    with pytest.raises(ValueError):
        jm.layer_norm(x, jnp.ones(5), None)
    with pytest.raises(ValueError):
        jm.rms_norm(x, jnp.ones((5, C)))


def test_errors_inside_vmap_and_grad():
    x = jnp.ones((4, 3, C))
    with pytest.raises(ValueError):
        jax.vmap(lambda t: jm.layer_norm(t, jnp.ones(C + 1)))(x)
    with pytest.raises(ValueError):
        jax.grad(lambda t: jnp.sum(jm.softmax(t, algorithm="nope")))(x)
    with pytest.raises(ValueError):
        jax.vmap(lambda t: jm.softmax(t, 2))(x)  # examples have rank 2
