"""Loads the compiled extension and registers every FFI handler with XLA, once, at import."""

from __future__ import annotations

import warnings

import jax
import jaxlib

from . import _jax_memops

_PLATFORMS = {"cpu": "cpu", "cuda": "CUDA"}


def _version_tuple(v: str) -> tuple[int, ...]:
    return tuple(int(p) for p in v.split(".")[:3] if p.isdigit())


def build_info() -> dict:
    """How the extension was built: its version, the jaxlib whose FFI headers it used, CUDA and archs."""
    return dict(_jax_memops.build_info())


def _register() -> None:
    for platform, table in _jax_memops.registrations().items():
        for name, capsule in table.items():
            jax.ffi.register_ffi_target(name, capsule, platform=_PLATFORMS[platform])


def _check_abi() -> None:
    built = build_info()["jaxlib_built_against"]
    if _version_tuple(built) > _version_tuple(jaxlib.__version__):
        warnings.warn(
            f"jax_memops was built against jaxlib {built} but jaxlib {jaxlib.__version__} is running; "
            "XLA may reject its handlers ('API version ... incompatible'). Rebuild against the installed "
            "jaxlib: pip install --no-build-isolation --force-reinstall .",
            RuntimeWarning,
            stacklevel=3,
        )


_check_abi()
_register()
