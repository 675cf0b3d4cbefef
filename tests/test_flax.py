"""jm.nnx / jm.linen against Flax's own layers: outputs, gradients, dtypes, parameter trees, checkpoints,
which configurations run the kernels and which fall back, and a few training steps of examples/gpt.py."""

from __future__ import annotations

import dataclasses
import importlib.util
import inspect
import os
import re
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("flax", minversion="0.12.2", reason="needs flax>=0.12.2: pip install 'jax_memops[flax]'")
pytest.importorskip("optax", reason="examples/gpt.py needs optax: pip install 'jax_memops[flax]'")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from flax import linen as nn  # noqa: E402
from flax import nnx, serialization  # noqa: E402

import jax_memops as jm  # noqa: E402

f32, bf16, f16 = jnp.float32, jnp.bfloat16, jnp.float16
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
C = 64


@pytest.fixture(autouse=True)
def full_precision_matmuls():
    """The tests compare the kernels with Flax's code, not a GPU's matmuls: at the default precision an f32 matmul on a
    GPU may take TF32 inputs, rounded where each program's fusions put them (at that precision the f32 attention
    tests read up to ~1e-3 apart on an H100). "highest" keeps f32 matmuls f32; on a CPU it changes nothing."""
    with jax.default_matmul_precision("highest"):
        yield


def uses_kernel(fn, *args):
    """Whether tracing fn(*args) reaches a jax_memops custom call (so a silent fallback fails the test)."""
    return "jax_memops_" in str(jax.make_jaxpr(fn)(*args))


def assert_close(a, b, dtype):
    """Equal dtypes and shapes; values within the tolerance of the less precise of `dtype` (the dtype
    the computation produced) and a's own dtype (a bfloat16 x has a bfloat16 gradient), relative to b's
    scale."""
    assert a.dtype == b.dtype and a.shape == b.shape, (a.dtype, b.dtype, a.shape, b.shape)
    tol = 1e-5 if jnp.dtype(dtype) == f32 and a.dtype == f32 else 2e-2
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    assert np.max(np.abs(a - b)) <= tol * max(1.0, np.max(np.abs(b))), np.max(np.abs(a - b))


def data(shape, dtype, seed=0):
    # A mean away from zero makes the variance formula matter; a spread makes scale/bias matter.
    x = np.random.default_rng(seed).normal(0.5, 2.0, shape).astype(np.float32)
    return jnp.asarray(x, dtype)


def randomize(state, seed=1):
    """Non-trivial parameters (ones and zeros would hide a swapped scale/bias)."""
    leaves, tree = jax.tree.flatten(state)
    rng = np.random.default_rng(seed)
    return jax.tree.unflatten(tree, [jnp.asarray(rng.normal(1.0, 0.5, l.shape), l.dtype) for l in leaves])


# -- NNX ------------------------------------------------------------------------------------------------
NNX_PAIRS = [(jm.nnx.LayerNorm, nnx.LayerNorm), (jm.nnx.RMSNorm, nnx.RMSNorm)]
OPTIONS = [{}, {"use_scale": False}, {"use_bias": False}, {"use_scale": False, "use_bias": False}]


def nnx_pair(ours, theirs, options, seed=0, features=C):
    """Flax's layer with random params and ours loaded from its nnx.state (a checkpoint round trip)."""
    if theirs is nnx.RMSNorm:
        options = {k: v for k, v in options.items() if k != "use_bias"}
    ref = theirs(features, rngs=nnx.Rngs(seed), **options)
    nnx.update(ref, randomize(nnx.state(ref)))
    mine = ours(features, rngs=nnx.Rngs(seed + 1), **options)
    nnx.update(mine, nnx.state(ref))
    return mine, ref


def nnx_grads(layer, x, ct):
    graphdef, state = nnx.split(layer)
    return jax.grad(lambda s, x: jnp.sum(nnx.merge(graphdef, s)(x).astype(f32) * ct), (0, 1))(state, x)


def assert_nnx_matches(mine, ref, x):
    """Our layer runs the kernel and gives Flax's output and gradients (of the state and x), within the tolerance of
    Flax's output dtype (its promotion: bf16 x with f32 params gives f32, dtype=bf16 gives bf16)."""
    assert uses_kernel(mine, x)
    y, y_ref = mine(x), ref(x)
    assert_close(y, y_ref, y_ref.dtype)
    ct = data(y.shape, f32, seed=2)
    for g, g_ref in zip(jax.tree.leaves(nnx_grads(mine, x, ct)), jax.tree.leaves(nnx_grads(ref, x, ct))):
        assert_close(g, g_ref, y_ref.dtype)


@pytest.mark.parametrize("pair", NNX_PAIRS, ids=["LayerNorm", "RMSNorm"])
@pytest.mark.parametrize("options", OPTIONS, ids=["scale+bias", "no-scale", "no-bias", "neither"])
@pytest.mark.parametrize("x_dtype,param_dtype,dtype", [
    (f32, f32, None), (bf16, bf16, None), (bf16, f32, None), (f32, f32, bf16)],
    ids=["f32", "bf16", "bf16-x-f32-params", "f32-x-dtype-bf16"])
def test_nnx_matches_flax(pair, options, x_dtype, param_dtype, dtype):
    options = dict(options, param_dtype=param_dtype, dtype=dtype)
    mine, ref = nnx_pair(*pair, options)
    assert jax.tree.structure(nnx.state(mine)) == jax.tree.structure(nnx.state(ref))
    assert_nnx_matches(mine, ref, data((3, 5, C), x_dtype))


@pytest.mark.parametrize("pair", NNX_PAIRS, ids=["LayerNorm", "RMSNorm"])
@pytest.mark.parametrize("dtype,converts", [(None, False), (bf16, False), (f16, True)],
                         ids=["widening", "dtype-bf16", "dtype-f16"])
def test_nnx_converts_x_only_where_flax_rounds_it(pair, dtype, converts):
    """A bf16 x with f32 params: NNX promotes x to f32 (exact), and the kernel reads the bf16 x itself and writes f32:
    no conversion in the program. Where NNX rounds x into another 16-bit dtype first (dtype=f16), so do we."""
    mine, _ = nnx_pair(*pair, {"dtype": dtype})
    graphdef, state = nnx.split(mine)
    x = data((3, 5, C), bf16)
    text = jax.jit(lambda s, x: nnx.merge(graphdef, s)(x)).lower(state, x).as_text()
    assert uses_kernel(lambda s, x: nnx.merge(graphdef, s)(x), state, x)
    x_converted = re.search(r"stablehlo\.convert %arg\d+ : \(tensor<3x5x64xbf16>\)", text) is not None
    assert x_converted == converts, text


# Reductions over several trailing axes (rows of 4 x C for the kernel): features on the last, on both, on the
# second last. The parameters have x's sizes along the feature axes (NNX's: flattened), broadcast over the others.
AXES_CASES = {"reduce-2-axes": ({"reduction_axes": (-2, -1)}, C),
              "2-axes-2-features": ({"reduction_axes": (-2, -1), "feature_axes": (-2, -1)}, 4 * C),
              "2-axes-feature-2nd-last": ({"reduction_axes": (1, 2), "feature_axes": 1}, 4)}


@pytest.mark.parametrize("pair", NNX_PAIRS, ids=["LayerNorm", "RMSNorm"])
@pytest.mark.parametrize("case", list(AXES_CASES))
@pytest.mark.parametrize("x_dtype", [f32, bf16], ids=["f32", "bf16"])
def test_nnx_trailing_axes_match_flax(pair, case, x_dtype):
    options, n = AXES_CASES[case]
    mine, ref = nnx_pair(*pair, options, features=n)
    assert_nnx_matches(mine, ref, data((3, 4, C), x_dtype))


@pytest.mark.parametrize("pair", NNX_PAIRS, ids=["LayerNorm", "RMSNorm"])
@pytest.mark.parametrize("case", ["features-not-reduced", "feature-axis-not-last", "mask", "eps-array"])
def test_nnx_fallback_is_flax(pair, case):
    ours, theirs = pair
    x, kwargs, options, n = data((3, 4, C), f32), {}, {}, C
    if case == "features-not-reduced":  # parameters that vary along an axis the statistics do not reduce
        options, n = {"reduction_axes": -1, "feature_axes": (-2, -1)}, 4 * C
    elif case == "feature-axis-not-last":  # a reduction over a leading axis: the kernel would need transposes
        options, n = {"reduction_axes": -2, "feature_axes": -2}, 4
    elif case == "mask":
        kwargs = {"mask": jnp.asarray(np.random.default_rng(0).random((3, 4, C)) > 0.3)}
    else:
        options = {"epsilon": jnp.float32(1e-3)}  # not a Python float: the kernel takes a static one
    ref = theirs(n, rngs=nnx.Rngs(0), **options)
    nnx.update(ref, randomize(nnx.state(ref)))
    mine = ours(n, rngs=nnx.Rngs(0), **options)
    nnx.update(mine, nnx.state(ref))
    assert not uses_kernel(lambda x: mine(x, **kwargs), x)
    np.testing.assert_array_equal(mine(x, **kwargs), ref(x, **kwargs))


def test_nnx_state_and_checkpoint_round_trip():
    """Same constructor defaults and state; a serialized checkpoint of either loads into the other."""
    for ours, theirs in NNX_PAIRS:
        a, b = ours(C, rngs=nnx.Rngs(3)), theirs(C, rngs=nnx.Rngs(3))
        assert inspect.signature(ours.__init__) == inspect.signature(theirs.__init__)
        assert a.epsilon == b.epsilon == 1e-6
        sa, sb = nnx.state(a), nnx.state(b)
        assert jax.tree.structure(sa) == jax.tree.structure(sb)
        jax.tree.map(np.testing.assert_array_equal, sa, sb)
        for src, dst in ((b, ours(C, rngs=nnx.Rngs(9))), (a, theirs(C, rngs=nnx.Rngs(9)))):
            nnx.update(src, randomize(nnx.state(src)))
            blob = serialization.to_bytes(nnx.to_pure_dict(nnx.state(src)))
            state = nnx.state(dst)
            nnx.replace_by_pure_dict(state, serialization.from_bytes(nnx.to_pure_dict(state), blob))
            nnx.update(dst, state)
            x = data((2, C), f32)
            assert_close(dst(x), src(x), f32)


# -- Linen ----------------------------------------------------------------------------------------------
LINEN_PAIRS = [(jm.linen.LayerNorm, nn.LayerNorm), (jm.linen.RMSNorm, nn.RMSNorm)]


def assert_linen_matches(mine, ref, params, x):
    """Our layer runs the kernel and gives Flax's output and gradients (of params and x) with the same params."""
    assert uses_kernel(lambda x: mine.apply(params, x), x)
    y, y_ref = mine.apply(params, x), ref.apply(params, x)
    assert_close(y, y_ref, y_ref.dtype)
    ct = data(y.shape, f32, seed=2)

    def grads(m):
        return jax.grad(lambda p, x: jnp.sum(m.apply(p, x).astype(f32) * ct), (0, 1))(params, x)

    for g, g_ref in zip(jax.tree.leaves(grads(mine)), jax.tree.leaves(grads(ref))):
        assert_close(g, g_ref, y_ref.dtype)


@pytest.mark.parametrize("pair", LINEN_PAIRS, ids=["LayerNorm", "RMSNorm"])
@pytest.mark.parametrize("options", OPTIONS, ids=["scale+bias", "no-scale", "no-bias", "neither"])
@pytest.mark.parametrize("x_dtype,param_dtype,dtype", [
    (f32, f32, None), (bf16, bf16, None), (bf16, f32, None), (f32, f32, bf16)],
    ids=["f32", "bf16", "bf16-x-f32-params", "f32-x-dtype-bf16"])
def test_linen_matches_flax(pair, options, x_dtype, param_dtype, dtype):
    ours, theirs = pair
    if theirs is nn.RMSNorm:
        options = {k: v for k, v in options.items() if k != "use_bias"}
    mine, ref = ours(param_dtype=param_dtype, dtype=dtype, **options), theirs(
        param_dtype=param_dtype, dtype=dtype, **options)
    x = data((3, 5, C), x_dtype)
    init_mine, init_ref = mine.init(jax.random.key(0), x), ref.init(jax.random.key(0), x)
    assert jax.tree.structure(init_mine) == jax.tree.structure(init_ref)  # same names, same collections
    jax.tree.map(lambda a, b: assert_close(a, b, f32), init_mine, init_ref)  # same shapes, dtypes, inits
    assert_linen_matches(mine, ref, randomize(init_ref), x)  # Flax's params, used as they are by ours


@pytest.mark.parametrize("pair", LINEN_PAIRS, ids=["LayerNorm", "RMSNorm"])
@pytest.mark.parametrize("case", list(AXES_CASES))
@pytest.mark.parametrize("x_dtype", [f32, bf16], ids=["f32", "bf16"])
def test_linen_trailing_axes_match_flax(pair, case, x_dtype):
    ours, theirs = pair
    options = AXES_CASES[case][0]
    mine, ref = ours(**options), theirs(**options)
    x = data((3, 4, C), x_dtype)
    init_mine, init_ref = mine.init(jax.random.key(0), x), ref.init(jax.random.key(0), x)
    assert jax.tree.map(jnp.shape, init_mine) == jax.tree.map(jnp.shape, init_ref)
    assert_linen_matches(mine, ref, randomize(init_ref), x)


@pytest.mark.parametrize("pair", LINEN_PAIRS, ids=["LayerNorm", "RMSNorm"])
@pytest.mark.parametrize("case", ["features-not-reduced", "feature-axis-not-last", "mask", "bf16-reductions",
                                  "axis_name"])
def test_linen_fallback_is_flax(pair, case):
    ours, theirs = pair
    x, kwargs, options = data((3, 4, C), f32), {}, {}
    if case == "features-not-reduced":
        options = {"reduction_axes": -1, "feature_axes": (-2, -1)}
    elif case == "feature-axis-not-last":
        options = {"reduction_axes": -2, "feature_axes": -2}
    elif case == "mask":
        kwargs = {"mask": jnp.asarray(np.random.default_rng(0).random((3, 4, C)) > 0.3)}
    elif case == "bf16-reductions":  # statistics in bfloat16: not what the kernel computes
        x, options = x.astype(bf16), {"force_float32_reductions": False}
    else:
        options = {"axis_name": "batch"}
    mine, ref = ours(**options), theirs(**options)
    # axis_name binds only under a transform; the params do not depend on it.
    plain = {k: v for k, v in options.items() if k != "axis_name"}
    params = randomize(theirs(**plain).init(jax.random.key(0), x, **kwargs))
    assert jax.tree.structure(ours(**plain).init(jax.random.key(0), x, **kwargs)) == jax.tree.structure(params)

    def run(m):
        f = lambda x: m.apply(params, x, **kwargs)  # noqa: E731
        return jax.vmap(f, axis_name="batch") if case == "axis_name" else f

    assert not uses_kernel(run(mine), x)
    np.testing.assert_array_equal(run(mine)(x), run(ref)(x))


# -- attention --------------------------------------------------------------------------------------------
def qkv(dtype, heads=4, kv_heads=4, seed=0):
    return (data((2, 12, heads, 16), dtype, seed) * 0.5, data((2, 12, kv_heads, 16), dtype, seed + 1) * 0.5,
            data((2, 12, kv_heads, 16), dtype, seed + 2))


def assert_attention_matches(ours, theirs, q, k, v, kw, dtype, seed=7, y_dtype=None):
    """Two attention functions called with the same arguments: the same output and gradients of q, k and v (of the
    sum of the output times a fixed cotangent), within the tolerance of `dtype` (the output's: `y_dtype`)."""
    ct = data(q.shape, f32, seed=seed)

    def value_and_grads(fn):
        loss = lambda q, k, v: jnp.sum(fn(q, k, v, **kw).astype(f32) * ct)  # noqa: E731
        return jax.jit(lambda q, k, v: (fn(q, k, v, **kw), jax.grad(loss, (0, 1, 2))(q, k, v)))(q, k, v)

    (y, g), (y_ref, g_ref) = value_and_grads(ours), value_and_grads(theirs)
    assert_close(y, y_ref, y_dtype or dtype)
    for a, b in zip(g, g_ref):
        assert_close(a, b, dtype)


def test_attention_signature_is_flax():
    def params(fn):  # names, kinds and defaults (annotations aside)
        return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]

    assert params(jm.nnx.dot_product_attention) == params(nnx.dot_product_attention)


@pytest.mark.parametrize("dtype,case", [(f32, "plain"), (f32, "causal"), (f32, "mask"), (f32, "mask+causal+bias"),
                                        (f32, "deterministic-dropout"), (bf16, "causal"), (bf16, "mask+causal+bias")])
def test_attention_matches_flax(dtype, case):
    q, k, v = qkv(dtype)
    rng = np.random.default_rng(5)
    kw = {"plain": {}, "causal": {"is_causal": True},
          "mask": {"mask": jnp.asarray(rng.random((2, 1, 12, 12)) > 0.3)},
          "mask+causal+bias": {"is_causal": True, "mask": jnp.asarray(rng.random((2, 4, 12, 12)) > 0.3),
                               "bias": jnp.asarray(rng.normal(size=(1, 4, 12, 12)), dtype)},
          "deterministic-dropout": {"dropout_rate": 0.5, "deterministic": True}}[case]
    assert uses_kernel(lambda q: jm.nnx.dot_product_attention(q, k, v, **kw), q)
    assert_attention_matches(jm.nnx.dot_product_attention, nnx.dot_product_attention, q, k, v, kw, dtype, seed=7)


DROPOUT_CASES = [(f32, True), (f32, False), (bf16, True)]


@pytest.mark.parametrize("module", ["nnx", "linen"])
@pytest.mark.parametrize("dtype,broadcast", DROPOUT_CASES, ids=[f"{jnp.dtype(d).name}-{'broadcast' if b else 'each'}"
                                                                for d, b in DROPOUT_CASES])
def test_attention_dropout_matches_flax(module, dtype, broadcast):
    """Active attention dropout after the kernel's softmax: the same entries dropped as by Flax for the same rng, the
    same values and gradients."""
    q, k, v = qkv(dtype)
    ours, flax_fn = {"nnx": (jm.nnx.dot_product_attention, nnx.dot_product_attention),
                     "linen": (jm.linen.dot_product_attention, nn.dot_product_attention)}[module]
    kw = {"dropout_rate": 0.4, "dropout_rng": jax.random.key(3), "broadcast_dropout": broadcast,
          "mask": jnp.asarray(np.random.default_rng(2).random((2, 1, 12, 12)) > 0.2)}
    assert uses_kernel(lambda q: ours(q, k, v, **kw), q)
    assert_attention_matches(ours, flax_fn, q, k, v, kw, dtype, seed=9)
    # the dropped weights are the same: v with a one-hot value row shows each output's weight on that key
    one_hot = jnp.zeros_like(v).at[:, 3].set(1)
    w, w_ref = (np.asarray(fn(q, k, one_hot, **kw)) for fn in (ours, flax_fn))
    np.testing.assert_array_equal(w == 0, w_ref == 0)
    assert (w == 0).any() and (w != 0).any()


GQA_CASES = [(f32, 2, {}), (f32, 1, {"is_causal": True}), (bf16, 2, {"mask": "per-head"}),
             (f32, 2, {"dropout_rate": 0.3, "bias": "per-head"})]


@pytest.mark.filterwarnings("ignore:Using 'Module.sow\\(\\)' outside")  # Flax's own sow warns alike
@pytest.mark.parametrize("dtype,kv_heads,kw", GQA_CASES, ids=["f32-2", "f32-1-causal", "bf16-2-mask", "f32-2-dropout"])
def test_attention_grouped_query_matches_flax(dtype, kv_heads, kw):
    """Query heads a multiple of the key/value heads: Flax's grouped einsums around the kernel's softmax; values,
    gradients and the sown weights as Flax's."""
    q, k, v = qkv(dtype, heads=4, kv_heads=kv_heads)
    if not kernel_grouped_query_in_flax():
        pytest.skip("this Flax has no grouped-query attention")
    rng = np.random.default_rng(4)
    kw = dict(kw)
    if kw.get("mask") == "per-head":
        kw["mask"] = jnp.asarray(rng.random((2, 4, 12, 12)) > 0.3)
    if kw.get("bias") == "per-head":
        kw["bias"] = jnp.asarray(rng.normal(size=(1, 4, 12, 12)), dtype)
    if "dropout_rate" in kw:
        kw["dropout_rng"] = jax.random.key(2)
    assert uses_kernel(lambda q: jm.nnx.dot_product_attention(q, k, v, **kw), q)
    assert_attention_matches(jm.nnx.dot_product_attention, nnx.dot_product_attention, q, k, v, kw, dtype, seed=7)

    class Sink(nnx.Module):  # the sown weights: [..., query heads, Q, K] in both
        pass

    sown = []
    for fn in (jm.nnx.dot_product_attention, nnx.dot_product_attention):
        sink = Sink()
        fn(q, k, v, module=sink, **{n: a for n, a in kw.items() if n not in ("dropout_rate", "dropout_rng")})
        sown.append(nnx.pop(sink, nnx.Intermediate)["attention_weights"][0])
    assert sown[0].shape == (2, 4, 12, 12)
    assert_close(sown[0], sown[1], dtype)


def kernel_grouped_query_in_flax():
    q, k, v = qkv(f32, heads=4, kv_heads=2)
    try:
        nnx.dot_product_attention(q, k, v)
    except Exception:  # Flax < 0.12.4 has no grouped-query attention
        return False
    return True


def test_attention_fallback_is_flax():
    """Heads that do not group (6 query heads over 4 key heads): Flax's own function, its error."""
    q, k, v = qkv(f32, heads=6, kv_heads=4)
    with pytest.raises(ValueError) as e:
        nnx.dot_product_attention(q, k, v)
    with pytest.raises(ValueError, match=re.escape(str(e.value))):
        jm.nnx.dot_product_attention(q, k, v)


@pytest.mark.filterwarnings("ignore:Using 'Module.sow\\(\\)' outside")  # Flax's own sow warns alike
def test_attention_in_multi_head_attention():
    """attention_fn=jm.nnx.dot_product_attention: same params, outputs, gradients and sown weights."""
    x = data((2, 12, 32), f32) * 0.5
    ref = nnx.MultiHeadAttention(4, 32, decode=False, rngs=nnx.Rngs(0))
    mine = nnx.MultiHeadAttention(4, 32, decode=False, attention_fn=jm.nnx.dot_product_attention,
                                  rngs=nnx.Rngs(1))
    nnx.update(mine, nnx.state(ref, nnx.Param))
    ct = data(x.shape, f32, seed=3)
    mask = nnx.make_causal_mask(x[:, :, 0], dtype=bool)  # (MultiHeadAttention's is_causal needs Flax 0.12.8)
    outs = []
    for m in (mine, ref):
        graphdef, state = nnx.split(m)
        def f(s, x):
            y = nnx.merge(graphdef, s)(x, mask=mask)
            return jnp.sum(y * ct), y

        outs.append(jax.jit(jax.value_and_grad(f, (0, 1), has_aux=True))(state, x))  # ((loss, y), grads)
    for a, b in zip(jax.tree.leaves(outs[0]), jax.tree.leaves(outs[1])):
        assert_close(a, b, f32)
    mine(x, mask=mask, sow_weights=True)
    ref(x, mask=mask, sow_weights=True)
    w, w_ref = (nnx.pop(m, nnx.Intermediate)["attention_weights"][0] for m in (mine, ref))
    assert_close(w, w_ref, f32)


def test_linen_attention_signature_is_flax():
    def params(fn):
        return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]

    assert params(jm.linen.dot_product_attention) == params(nn.dot_product_attention)


def _counting_dot_general(calls):
    def dot_general(*args, **kwargs):
        calls.append(1)
        return jax.lax.dot_general(*args, **kwargs)
    return dot_general


LINEN_ATTENTION_CASES = [(f32, "plain"), (f32, "mask"), (f32, "mask+bias"), (f32, "deterministic-dropout"),
                         (f32, "dot_general"), (f32, "einsums"), (bf16, "mask+bias"), (bf16, "force_fp32"),
                         (bf16, "dtype-f32")]


@pytest.mark.parametrize("dtype,case", LINEN_ATTENTION_CASES, ids=[f"{jnp.dtype(d).name}-{c}" for d, c in
                                                                     LINEN_ATTENTION_CASES])
def test_linen_attention_matches_flax(dtype, case):
    q, k, v = qkv(dtype)
    rng = np.random.default_rng(6)
    mask = jnp.asarray(rng.random((2, 4, 12, 12)) > 0.3)
    calls = []  # the given einsums' or dot_general's
    einsum = lambda *a: (calls.append(1), jnp.einsum(*a))[1]  # noqa: E731
    kw = {"plain": {}, "mask": {"mask": mask[:, :1]},
          "mask+bias": {"mask": mask, "bias": jnp.asarray(rng.normal(size=(1, 4, 12, 12)), dtype)},
          "deterministic-dropout": {"dropout_rate": 0.5, "deterministic": True},
          "dot_general": {"einsum_dot_general": _counting_dot_general(calls)},
          "einsums": {"qk_attn_weights_einsum": einsum, "attn_weights_value_einsum": einsum},
          "force_fp32": {"force_fp32_for_softmax": True, "mask": mask},
          "dtype-f32": {"dtype": f32}}[case]
    assert uses_kernel(lambda q: jm.linen.dot_product_attention(q, k, v, **kw), q)
    if case in ("einsums", "dot_general"):
        assert len(calls) == 2, f"the given {case} must make both products"
    assert_attention_matches(jm.linen.dot_product_attention, nn.dot_product_attention, q, k, v, kw, dtype, seed=8,
                             y_dtype=f32 if case == "dtype-f32" else dtype)


@pytest.mark.parametrize("case", ["grouped-query", "one-einsum", "precision+einsums"])
def test_linen_attention_fallback_is_flax(case):
    q, k, v = qkv(f32, kv_heads=2 if case == "grouped-query" else 4)
    kw = {"grouped-query": {},
          "one-einsum": {"qk_attn_weights_einsum": jnp.einsum},
          "precision+einsums": {"precision": jax.lax.Precision.HIGHEST, "qk_attn_weights_einsum": jnp.einsum,
                                "attn_weights_value_einsum": jnp.einsum}}[case]
    try:
        expected = nn.dot_product_attention(q, k, v, **kw)
    except (ValueError, AssertionError) as e:  # what Flax rejects, ours rejects alike
        with pytest.raises(type(e), match=re.escape(str(e))):
            jm.linen.dot_product_attention(q, k, v, **kw)
        return
    assert not uses_kernel(lambda q: jm.linen.dot_product_attention(q, k, v, **kw), q)
    np.testing.assert_array_equal(jm.linen.dot_product_attention(q, k, v, **kw), expected)


def test_linen_attention_in_multi_head_attention():
    """attention_fn=jm.linen.dot_product_attention: same params, outputs, gradients and sown weights."""
    x = data((2, 12, 32), f32) * 0.5
    mask = nn.make_causal_mask(x[:, :, 0])
    mods = [nn.MultiHeadDotProductAttention(4, attention_fn=fn) for fn in (jm.linen.dot_product_attention,
                                                                          nn.dot_product_attention)]
    params = mods[1].init(jax.random.key(0), x, mask=mask)
    ct = data(x.shape, f32, seed=3)
    outs = []
    for m in mods:
        f = lambda p, x, m=m: (lambda y: (jnp.sum(y * ct), y))(m.apply(p, x, mask=mask))  # noqa: E731
        outs.append(jax.jit(jax.value_and_grad(f, (0, 1), has_aux=True))(params, x))
    assert jax.tree.structure(outs[0]) == jax.tree.structure(outs[1])
    for a, b in zip(jax.tree.leaves(outs[0]), jax.tree.leaves(outs[1])):
        assert_close(a, b, f32)
    assert uses_kernel(lambda x: mods[0].apply(params, x, mask=mask), x)
    sown = [m.apply(params, x, mask=mask, sow_weights=True, mutable=["intermediates"])[1] for m in mods]
    w, w_ref = (s["intermediates"]["attention_weights"][0] for s in sown)
    assert_close(w, w_ref, f32)


# -- packaging and the example ----------------------------------------------------------------------------
def test_import_does_not_import_flax():
    code = "import sys, jax_memops as jm; assert 'flax' not in sys.modules; jm.linen; assert 'flax' in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, cwd="/")
    import jax_memops.linen
    import jax_memops.nnx

    assert jm.nnx is jax_memops.nnx and jm.linen is jax_memops.linen
    with pytest.raises(AttributeError):
        jm.not_a_submodule  # noqa: B018


@pytest.fixture(scope="module")
def gpt():
    spec = importlib.util.spec_from_file_location("gpt_example", os.path.join(ROOT, "examples", "gpt.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_gpt_example_trains_and_modes_agree(gpt, tmp_path):
    cfg = dataclasses.replace(gpt.TINY, layers=1, block=16)
    text = gpt.load_text()
    s_jm, s_flax = (nnx.state(gpt.GPT(cfg, text[1], ops, rngs=nnx.Rngs(0))) for ops in ("jm", "flax"))
    assert jax.tree.structure(s_jm) == jax.tree.structure(s_flax)
    runs, summary = gpt.compare(cfg, steps=20)
    for run in runs.values():
        assert np.mean(run["loss"][-5:]) < run["loss"][0] - 0.5, run["loss"]
    assert summary["max_loss_diff"] < 1e-3, summary
    gpt.write(str(tmp_path), runs["jm"])
    assert (tmp_path / "loss_jm.csv").read_text().count("\n") == 21
