"""Every Python file of the project resolves the names it uses (pyflakes' undefined-name checks), and the
standalone CUDA benchmarks compile where nvcc is present.

Much of tests/ runs only where JAX sees a GPU and the benchmarks run only on one, so a name that is not
defined there (a missing import) would pass every CPU run and fail first on the device: v11's
`test_gpu_fwd_push_reduce` used `re` without importing it. This runs on CPU, over the GPU-only code too.
"""

from __future__ import annotations

import pathlib

import pytest

import memops_testing as mt

pyflakes_api = pytest.importorskip("pyflakes.api", reason="pyflakes (README's test command installs it)")
from pyflakes import messages  # noqa: E402
from pyflakes.reporter import Reporter  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent
FOLDERS = ("jax_memops", "tests", "benchmarks", "examples")
# The messages that are bugs at run time; unused imports and the like are style, left to review.
UNDEFINED = (messages.UndefinedName, messages.UndefinedLocal, messages.UndefinedExport)


class _Collect(Reporter):
    def __init__(self):
        self.found = []

    def unexpectedError(self, filename, msg):
        self.found.append(f"{filename}: {msg}")

    def syntaxError(self, filename, msg, lineno, offset, text):
        self.found.append(f"{filename}:{lineno}: syntax error: {msg}")

    def flake(self, message):
        if isinstance(message, UNDEFINED):
            self.found.append(str(message))


def _sources():
    return sorted(p for folder in FOLDERS for p in (ROOT / folder).rglob("*.py") if p.is_file())


def test_sources_found():
    names = {p.relative_to(ROOT).as_posix() for p in _sources()}
    assert {"tests/test_softmax.py", "jax_memops/__init__.py", "benchmarks/softmax_ab.py"} <= names


def test_no_undefined_names():
    report = _Collect()
    for path in _sources():
        pyflakes_api.check(path.read_text(), str(path.relative_to(ROOT)), report)
    assert not report.found, "\n".join(report.found)


def test_the_check_sees_an_undefined_name():
    report = _Collect()
    pyflakes_api.check("import os\n\ndef f(s):\n    return re.findall('x', s)\n", "probe.py", report)
    assert report.found and "undefined name 're'" in report.found[0], report.found


# The benchmarks' standalone CUDA programs (built by hand on the device, outside the package's CMake build)
# against the package's headers: compiled here (host and sm_90 device code, not run) wherever nvcc is
# found, so a header change that breaks them fails on CPU, not first on the device.
@pytest.mark.parametrize("source", sorted(p.name for p in (ROOT / "benchmarks").glob("*.cu")))
def test_standalone_cuda_benchmarks_compile(source, tmp_path):
    out = mt.nvcc_build(str(ROOT / "benchmarks" / source), str(tmp_path / "a.o"), "-arch=sm_90", "-c", timeout=600)
    assert out.returncode == 0, out.stderr[-4000:]
