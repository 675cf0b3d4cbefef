"""Loads the compiled extension and registers every FFI handler with XLA, once, at import."""

from __future__ import annotations

import os
import warnings

import jax
import jaxlib

from . import _jax_memops

_PLATFORMS = {"cpu": "cpu", "cuda": "CUDA"}
CPU_ISAS = ("auto", "baseline", "avx2", "avx512")
_WIDER_ISAS = ("avx512", "avx2")  # the wider builds of the CPU handlers, widest first
_ISA_NAMES = {"avx2": "AVX2", "avx512": "AVX-512"}
_ISA_NEEDS = {"avx2": "AVX2 and F16C", "avx512": "AVX-512 (F, BW, CD, DQ, VL), AVX2 and F16C"}  # CMakeLists.txt's flags


def _version_tuple(v: str) -> tuple[int, ...]:
    return tuple(int(p) for p in v.split(".")[:3] if p.isdigit())


def _cpu_handlers() -> tuple[str, dict | None]:
    """(the CPU handlers' build in use, its capsules, None for the main module's). JAX_MEMOPS_CPU_ISA: auto (the
    widest build that was made and that this CPU runs: AVX-512, AVX2, else the baseline one), baseline, avx2 or
    avx512 (an error where that build cannot run). A wider build's library is loaded only after the CPU is checked:
    its code would fault on a CPU without those instructions. Every build gives bitwise the same results, NaNs' sign
    bits apart (tests/test_cpu_isa.py)."""
    isa = os.environ.get("JAX_MEMOPS_CPU_ISA", "auto")
    if isa not in CPU_ISAS:
        raise ValueError(f"JAX_MEMOPS_CPU_ISA={isa!r}: expected one of {', '.join(CPU_ISAS)}")
    if isa == "baseline":
        return "baseline", None
    info = _jax_memops.build_info()
    for candidate in _WIDER_ISAS if isa == "auto" else (isa,):
        library = info[f"cpu_{candidate}_library"]
        if library and _jax_memops.cpu_supports(candidate):
            path = os.path.join(os.path.dirname(_jax_memops.__file__), library)  # beside the module, editable or not
            return candidate, dict(_jax_memops.cpu_handlers_from(path))
        if isa != "auto":
            why = f"it needs {_ISA_NEEDS[isa]}, which this CPU lacks" if library else "it was not built"
            raise RuntimeError(f"JAX_MEMOPS_CPU_ISA={isa}, but the {_ISA_NAMES[isa]} build of the CPU handlers "
                               f"cannot run: {why}")
    return "baseline", None


_CPU_ISA, _CPU_TABLE = _cpu_handlers()


def build_info() -> dict:
    """How the extension was built: its version, the jaxlib whose FFI headers it used, CUDA and archs, the files of the
    AVX2 and AVX-512 builds of the CPU handlers ("" where none was made); and which CPU build is registered
    ("cpu_isa": baseline, avx2 or avx512)."""
    return dict(_jax_memops.build_info(), cpu_isa=_CPU_ISA)


def _register() -> None:
    for platform, table in _jax_memops.registrations().items():
        if platform == "cpu" and _CPU_TABLE is not None:
            table = _CPU_TABLE
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
