"""pytest configuration of the jax_memops suite: device parametrization, per-test RNG, markers.

Every device-parametrized test runs on "cpu" always and on "gpu" when JAX sees a GPU (and
jax_memops was built with its CUDA kernels); otherwise the gpu case is skipped with a reason.
The host platform is split into 8 virtual CPU devices (for test_sharding.py's meshes) before anything
imports JAX; single-device tests are unaffected (jit places on one device).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import zlib

import numpy as np
import pytest

# Make `import memops_testing` work whatever pytest's import mode is.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

CPU_DEVICES = 8
if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                               f" --xla_force_host_platform_device_count={CPU_DEVICES}").strip()

import jax  # noqa: E402
import memops_testing as mt  # noqa: E402


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: slow-ish test (large inputs or many compilations)")
    config.addinivalue_line("markers", "gpu: test that needs a GPU (skipped when JAX sees none)")
    # The compilation cache that run_script(compile_cache=True) shares (memops_testing.py): made once per test run
    # by the controlling process (xdist workers inherit its environment; they have `workerinput`) and removed at its
    # end; JAX_MEMOPS_TEST_COMPILE_CACHE= (empty) turns it off.
    if not hasattr(config, "workerinput") and mt.COMPILE_CACHE_ENV not in os.environ:
        os.environ[mt.COMPILE_CACHE_ENV] = tempfile.mkdtemp(prefix="jax_memops_compile_cache_")
        config._jm_compile_cache = os.environ[mt.COMPILE_CACHE_ENV]


def pytest_unconfigure(config):
    root = getattr(config, "_jm_compile_cache", None)
    if root is not None:
        shutil.rmtree(root, ignore_errors=True)


def gpu_devices():
    try:
        return list(jax.devices("gpu"))
    except RuntimeError:
        return []


def cuda_built():
    """Whether jax_memops reports CUDA kernels compiled in (False when it cannot be imported)."""
    try:
        import jax_memops as jm

        return bool(jm.build_info().get("cuda", False))
    except Exception:  # pragma: no cover - reported by the tests that import jax_memops
        return False


def gpu_skip_reason():
    """None when GPU tests can run, else why they are skipped."""
    if not gpu_devices():
        return "no GPU visible to JAX (jax.devices('gpu') is empty or raises)"
    if not cuda_built():
        return "jax_memops was built without CUDA kernels (build_info()['cuda'] is False)"
    return None


@pytest.fixture(params=["cpu", pytest.param("gpu", marks=pytest.mark.gpu)])
def device(request):
    """A jax.Device of the requested platform; inputs are placed there with jax.device_put."""
    if request.param == "gpu":
        reason = gpu_skip_reason()
        if reason is not None:
            pytest.skip(reason)
        return gpu_devices()[0]
    return jax.devices("cpu")[0]


@pytest.fixture
def rng(request):
    """A fresh generator with a seed of its own per test (stable across runs: crc32 of the test id)."""
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))


@pytest.fixture
def gpu():
    """The first GPU; skips the test when none can be used."""
    reason = gpu_skip_reason()
    if reason is not None:
        pytest.skip(reason)
    return gpu_devices()[0]
