"""Lowering: every op becomes a stablehlo.custom_call to its jax_memops_* FFI target, for the CPU
(the default lowering) and for CUDA (lowering_platforms=("cuda",), which works on a CPU-only
machine when the CUDA kernels are compiled in); and build_info()."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import pytest

import jax_memops as jm

X = jnp.ones((4, 33), jnp.float32)
S = jnp.ones((33,), jnp.float32)
B = jnp.zeros((33,), jnp.float32)


def _fwd(op):
    return {
        "softmax": lambda x, s, b: jm.softmax(x),
        "layer_norm": lambda x, s, b: jm.layer_norm(x, s, b),
        "rms_norm": lambda x, s, b: jm.rms_norm(x, s),
        "gelu": lambda x, s, b: jm.scale_bias_gelu(x, s, b),
    }[op]


def _grad(op):
    f = _fwd(op)
    return jax.grad(lambda x, s, b: jnp.sum(f(x, s, b) * jnp.cos(x)), argnums=(0, 1, 2))


OPS = ["softmax", "layer_norm", "rms_norm", "gelu"]
DTYPES = [jnp.float32, jnp.bfloat16, jnp.float16]


def _targets(text):
    """custom_call targets in StableHLO text (pretty `@name(` or generic call_target_name form)."""
    pretty = re.findall(r"stablehlo\.custom_call\s+@([\w.$-]+)", text)
    generic = re.findall(r'call_target_name\s*=\s*"([^"]+)"', text)
    return set(pretty) | set(generic)


def _check(text, op, grad):
    assert "stablehlo.custom_call" in text
    targets = _targets(text)
    want = {f"jax_memops_{op}_fwd"} | ({f"jax_memops_{op}_bwd"} if grad else set())
    assert want <= targets, f"expected custom_call targets {sorted(want)}, found {sorted(targets)}"
    others = {t for t in targets if t.startswith("jax_memops_")} - want
    assert not others, f"unexpected jax_memops targets {sorted(others)}"


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "bf16", "f16"])
@pytest.mark.parametrize("grad", [False, True], ids=["fwd", "grad"])
@pytest.mark.parametrize("op", OPS)
def test_cpu_lowering_has_custom_calls(op, grad, dtype):
    x = X.astype(dtype)
    fn = _grad(op) if grad else _fwd(op)
    # the default lowering (the default backend's platform) ...
    _check(jax.jit(fn).lower(x, S, B).as_text(), op, grad)
    # ... and explicitly for the CPU, whatever the default backend is
    _check(jax.jit(fn).trace(x, S, B).lower(lowering_platforms=("cpu",)).as_text(), op, grad)


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "bf16", "f16"])
@pytest.mark.parametrize("grad", [False, True], ids=["fwd", "grad"])
@pytest.mark.parametrize("op", OPS)
def test_cuda_lowering_has_custom_calls(op, grad, dtype):
    if not jm.build_info()["cuda"]:
        pytest.skip("jax_memops built without CUDA kernels (build_info()['cuda'] is False)")
    x = X.astype(dtype)
    fn = _grad(op) if grad else _fwd(op)
    text = jax.jit(fn).trace(x, S, B).lower(lowering_platforms=("cuda",)).as_text()
    _check(text, op, grad)


def test_softmax_other_axis_lowering():
    text = jax.jit(lambda x: jm.softmax(x, 0)).lower(jnp.ones((3, 5, 7))).as_text()
    assert "jax_memops_softmax_fwd" in _targets(text)


def test_gelu_number_params_lowering():
    text = jax.jit(jax.grad(lambda x: jnp.sum(jm.scale_bias_gelu(x, 1.5, -0.5) ** 2))).lower(X).as_text()
    assert {"jax_memops_gelu_fwd", "jax_memops_gelu_bwd"} <= _targets(text)


@pytest.mark.parametrize("op", OPS)
def test_vmap_lowering_keeps_custom_call(op):
    """Under vmap the op still lowers to the handwritten kernel (not a fallback)."""
    fn = jax.vmap(_fwd(op), in_axes=(0, 0, 0))
    text = jax.jit(fn).lower(jnp.ones((3, 4, 33)), jnp.ones((3, 33)), jnp.ones((3, 33))).as_text()
    assert f"jax_memops_{op}_fwd" in _targets(text)


def test_build_info():
    info = jm.build_info()
    assert isinstance(info, dict)
    for key in ("version", "cuda", "cuda_archs", "jaxlib_built_against"):
        assert key in info, f"build_info() lacks {key!r}: {info}"
    assert isinstance(info["version"], str) and info["version"]
    assert isinstance(info["cuda"], bool)
    assert isinstance(info["cuda_archs"], str)
    assert isinstance(info["jaxlib_built_against"], str) and info["jaxlib_built_against"]
    if info["cuda"]:
        assert info["cuda_archs"], "CUDA built but no archs reported"


# ----------------------------------------------------------------------------------------------
# the parameter-gradient workspace: an extra f32 result of the backward custom calls, lowering only
# ----------------------------------------------------------------------------------------------

_BWD = {
    "layer_norm": (lambda x, s, b: jm.layer_norm(x, s, b), 2),
    "rms_norm": (lambda x, s, b: jm.rms_norm(x, s), 1),
    "gelu": (lambda x, s, b: jm.scale_bias_gelu(x, s, b), 2),
}


def _bwd_call_results(text, op):
    """The result types of the jax_memops_<op>_bwd custom call in StableHLO text."""
    lines = [ln for ln in text.splitlines() if f"jax_memops_{op}_bwd" in ln and "custom_call" in ln]
    assert len(lines) == 1, lines
    return re.findall(r"tensor<([^>]*)>", lines[0].split("->")[-1])


@pytest.mark.parametrize("platform", ["cpu", "cuda"])
@pytest.mark.parametrize("op", sorted(_BWD))
def test_backward_workspace_result(op, platform):
    if platform == "cuda" and not jm.build_info()["cuda"]:
        pytest.skip("jax_memops built without CUDA kernels")
    from jax_memops._primitive import partial_rows

    f, wanted = _BWD[op]
    x = jnp.ones((40, 33), jnp.bfloat16)
    grad = jax.grad(lambda x, s, b: jnp.sum(f(x, s, b).astype(jnp.float32) * jnp.cos(x)), argnums=(0, 1, 2))
    text = jax.jit(grad).trace(x, S, B).lower(lowering_platforms=(platform,)).as_text()
    results = _bwd_call_results(text, op)
    p = partial_rows(40, 1, 2)
    assert results[-1] == f"{wanted}x{p}x33xf32", results  # the workspace: (S, G*P, C)
    assert len(results) == 2 + wanted  # dx, the gradients, the workspace
    # ... which the program does not return: its results are dx, dscale, dbias only
    out = jax.jit(grad)(x, S, B)
    assert [o.shape for o in out] == [(40, 33), (33,), (33,)]


def test_backward_workspace_under_vmap():
    """Batched parameters: G row groups, P partial rows each (G*P rows of the workspace)."""
    from jax_memops._primitive import partial_rows

    f = lambda x, s: jnp.sum(jm.layer_norm(x, s) ** 2)  # noqa: E731
    xs, ss = jnp.ones((3, 50, 33)), jnp.ones((3, 33))
    text = jax.jit(jax.vmap(jax.grad(f, 1))).lower(xs, ss).as_text()
    results = _bwd_call_results(text, "layer_norm")
    assert results[-1] == f"1x{3 * partial_rows(150, 3, 4, 33)}x33xf32", results


def test_backward_workspace_absent_without_grads():
    """No parameter gradient wanted: a (0,) workspace, so the handler signature stays fixed."""
    text = jax.jit(jax.grad(lambda x: jnp.sum(jm.layer_norm(x) ** 2))).lower(X).as_text()
    assert _bwd_call_results(text, "layer_norm")[-1] == "0xf32"


def test_partial_rows():
    from jax_memops._primitive import partial_rows

    assert partial_rows(0, 1, 4) == 0                   # no rows: no partials (grads are zeros)
    assert partial_rows(37, 1, 4) == 37                 # rows < 132: one row per partial
    assert partial_rows(2**26 // 768, 1, 4) == 264      # two waves
    assert partial_rows(2**26 // 12288, 1, 2) == 132    # capped, but every SM gets a block
    assert partial_rows(2**26 // 4096, 1, 4) == 256     # rows * itemsize / 256
    assert partial_rows(1000, 8, 4) == 17               # per group: ceil(132 / 8), <= 125 rows each
    assert partial_rows(16, 8, 4) == 2                  # rows of a group bound it
    for rows, groups in [(1, 1), (5, 5), (1000, 1000), (10**6, 7 * 11)]:
        p = partial_rows(rows, groups, 2)
        assert 1 <= p <= rows // groups


def test_partial_rows_of_the_norms(monkeypatch):
    """The norms' rule (v30): 264 where a row's team has <= 256 threads and the rows pay for it, else 132."""
    from jax_memops._primitive import partial_rows

    e = 2**26
    assert partial_rows(e // 4096, 1, 2, 4096) == 264   # bf16 4096: two 256-thread blocks per SM (GELU's rule: 132)
    assert partial_rows(e // 3072, 1, 2, 3072) == 264   # GELU's rule: 170, a partial second wave
    assert partial_rows(e // 5120, 1, 4, 5120) == 132   # 512-thread teams: one wave (GELU's rule: 204)
    assert partial_rows(e // 8192, 1, 2, 8192) == 132
    assert partial_rows(e // 4097, 1, 4, 4097) == 132   # unvectorized: 8 elements per thread, 512-thread teams
    assert partial_rows(e // 2052, 1, 2, 2052) == 132   # ... as for bf16 2052 (C % 8 != 0)
    assert partial_rows(e // 768, 1, 4, 768) == 264
    assert partial_rows(8192, 1, 2, 4096) == 132        # 8192 * 2 / 128 < 248: the partials would cost too much
    assert partial_rows(37, 1, 4, 64) == 37             # rows < 132: one row per partial
    assert partial_rows(10**6, 4, 2, 1024) == 66        # per group: 264 / 4
    monkeypatch.setenv("JAX_MEMOPS_NORM_PARTIALS", "v29")  # the rule before v30: GELU's
    assert partial_rows(e // 4096, 1, 2, 4096) == partial_rows(e // 4096, 1, 2) == 132


@pytest.mark.parametrize("op,rows", [("layer_norm", 264), ("rms_norm", 264), ("gelu", 132)])
def test_backward_workspace_follows_the_op_rule(op, rows):
    """bf16 (16384, 4096): the norms' workspace by their rule, GELU's by its own (lowering only)."""
    f, wanted = _BWD[op]
    x = jax.ShapeDtypeStruct((16384, 4096), jnp.bfloat16)
    p = jax.ShapeDtypeStruct((4096,), jnp.float32)
    grad = jax.grad(lambda x, s, b: jnp.sum(f(x, s, b).astype(jnp.float32)), argnums=(0, 1, 2))
    text = jax.jit(grad).trace(x, p, p).lower(lowering_platforms=("cpu",)).as_text()
    assert _bwd_call_results(text, op)[-1] == f"{wanted}x{rows}x4096xf32"
