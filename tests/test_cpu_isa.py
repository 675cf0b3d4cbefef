"""The builds of the CPU handlers (baseline, AVX2 and AVX-512, picked at import by JAX_MEMOPS_CPU_ISA,
jax_memops/_ext.py): the same bits for every op (NaNs need only be NaN in both), and the choice reported and checked."""

import os
import subprocess
import sys

import numpy as np
import pytest

import jax_memops as jm
from jax_memops import _jax_memops

import memops_testing as mt

WIDER = ("avx2", "avx512")  # the wider builds, in the order auto prefers them last to first
RUNS = {isa: bool(jm.build_info()[f"cpu_{isa}_library"]) and _jax_memops.cpu_supports(isa) for isa in WIDER}

# Every CPU target (forward and backward of the four ops; the unfused pieces and the copy, forward) over odd shapes,
# the three dtypes, and rows holding NaN, -inf and huge entries; every output saved as float32 (exact for each dtype).
_DUMP_SCRIPT = r"""
import numpy as np, jax, jax.numpy as jnp
jax.config.update("jax_platforms", "cpu")
import jax_memops as jm
from jax_memops import unfused
out = {{"isa": np.array(jm.build_info()["cpu_isa"])}}
rng = np.random.default_rng(11)
with_vjp = {{
    "softmax": lambda x, s, b: jm.softmax(x),
    "layer_norm": jm.layer_norm,
    "rms_norm": lambda x, s, b: jm.rms_norm(x, s),
    "gelu": jm.scale_bias_gelu,
}}
forward = {{"chain": lambda x: unfused.three_kernels(x, 1.5, 0.25), "copy": unfused.copy}}
for dt in (jnp.float32, jnp.bfloat16, jnp.float16):
    for rows, c in {shapes!r}:
        x = (3.0 * rng.standard_normal((rows, c))).astype(np.float32)
        if rows > 2 and c > 1:
            x[0, c // 2] = np.nan
            x[1, 0] = -np.inf
            x[2, c - 1] = 6e4 if dt == jnp.float16 else 1e30
        x = jnp.asarray(x, dt)
        s = jnp.asarray(1 + 0.1 * rng.standard_normal(c), jnp.float32)
        b = jnp.asarray(0.1 * rng.standard_normal(c), jnp.float32)
        g = jnp.asarray(rng.standard_normal((rows, c)), dt)
        results = {{name: (f(x),) for name, f in forward.items()}}
        for name, f in with_vjp.items():
            y, pullback = jax.vjp(f, x, s, b)
            results[name] = (y,) + tuple(pullback(g))
        for name, arrays in results.items():
            for i, a in enumerate(arrays):
                key = f"{{name}} {{jnp.dtype(dt).name}} {{rows}}x{{c}} {{i}}"
                out[key] = np.asarray(a.astype(jnp.float32))  # exact for every dtype
np.savez({path!r}, **out)
print("OK")
"""
# (264, 4099): the parameter gradients summed in 8 runs of rows through the workspace (cpp/cpu_grad_sums.h); the
# shapes of 10^5 elements and more before it: by columns.
SHAPES = [(3, 1), (5, 2), (4, 31), (6, 33), (65, 1000), (3, 4097), (2, 50257), (129, 768), (17, 12289), (264, 4099)]
OUTPUTS = 3 * len(SHAPES) * (4 * 4 + 2)  # dtypes x shapes x (y and 3 gradients of 4 ops, 2 forwards)


def _dump(path, isa: str) -> dict:
    """The outputs of _DUMP_SCRIPT under JAX_MEMOPS_CPU_ISA=isa, in a fresh interpreter (the choice is made once, at
    import)."""
    mt.run_script(_DUMP_SCRIPT, 600, env={"JAX_MEMOPS_CPU_ISA": isa, "JAX_PLATFORMS": "cpu"}, shapes=SHAPES,
                  path=str(path))
    with np.load(path) as data:
        return {k: data[k] for k in data.files}


def _import_under(isa: str) -> subprocess.CompletedProcess:
    code = "import jax_memops as jm; print(jm.build_info()['cpu_isa'])"
    return subprocess.run([sys.executable, "-c", code], env=dict(os.environ, JAX_MEMOPS_CPU_ISA=isa), cwd="/",
                          capture_output=True, text=True, timeout=300)


def _same_bits(a, b) -> bool:
    """The same bits but in NaNs, which need only be NaN in both: which operand's NaN an instruction passes on (the
    input's, or x86's default NaN, the sign bit apart) depends on the order a loop's vectorized and scalar forms
    give their operands (seen: the GELU backward's rows of C = 2 with NaN and 1e30 inputs)."""
    nan = np.isnan(a)
    return bool(np.array_equal(nan, np.isnan(b)) and np.array_equal(a.view(np.uint32)[~nan], b.view(np.uint32)[~nan]))


@pytest.fixture(scope="module")
def baseline_outputs(tmp_path_factory):
    base = _dump(tmp_path_factory.mktemp("isa") / "baseline.npz", "baseline")
    assert str(base.pop("isa")) == "baseline" and len(base) == OUTPUTS
    return base


@pytest.mark.parametrize("isa", WIDER)
def test_cpu_builds_bitwise_equal(tmp_path, isa, baseline_outputs):
    if not RUNS[isa]:
        pytest.skip(f"the {isa} build of the CPU handlers was not made or cannot run here")
    wide = _dump(tmp_path / f"{isa}.npz", isa)
    assert str(wide.pop("isa")) == isa
    assert baseline_outputs.keys() == wide.keys()
    differ = [k for k in baseline_outputs if not _same_bits(baseline_outputs[k], wide[k])]
    assert not differ, f"{len(differ)} outputs differ between the baseline and {isa} builds, e.g. {differ[:5]}"


def test_cpu_isa_reported():
    for isa in WIDER:
        assert isinstance(jm.build_info()[f"cpu_{isa}_library"], str)
    assert jm.build_info()["cpu_isa"] in ("baseline", *WIDER)
    if os.environ.get("JAX_MEMOPS_CPU_ISA", "auto") == "auto":
        widest = [isa for isa in WIDER if RUNS[isa]]
        assert jm.build_info()["cpu_isa"] == (widest[-1] if widest else "baseline")
    out = _import_under("baseline")
    assert out.returncode == 0 and out.stdout.split() == ["baseline"], out.stderr[-2000:]


@pytest.mark.parametrize("isa", WIDER)
def test_cpu_isa_asked(isa):
    out = _import_under(isa)
    if RUNS[isa]:
        assert out.returncode == 0 and out.stdout.split() == [isa], out.stderr[-2000:]
    else:
        assert out.returncode != 0 and f"JAX_MEMOPS_CPU_ISA={isa}" in out.stderr, out.stderr[-2000:]


def test_cpu_isa_unknown():
    out = _import_under("sse9")
    assert out.returncode != 0
    assert "ValueError: JAX_MEMOPS_CPU_ISA='sse9': expected one of auto, baseline, avx2, avx512" in out.stderr
