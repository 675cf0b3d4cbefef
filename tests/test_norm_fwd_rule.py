"""The CUDA norms' forward rule for the lean rows (cpp/norm_fwd.cu), checked on the host: tests/norm_fwd_rule.cu
includes norm_fwd.cu and calls its selection with a launch that records the kernel and plan instead of launching, for
every row length of the register classes, each dtype pair and set of parameters, under each JAX_MEMOPS_NORM_FWD
version (read once per process, so one run each). Nothing reaches a GPU: it runs wherever nvcc builds it, CI's CPU
machine too, so a rule that ends in an error, launches twice, or picks another kernel than v68 (the default), v65,
v62, v63, v66, v67, v61, v60, v58 or v57 name for a few rows (norm_fwd_rule.cu's picks) fails here before a device
sees it."""

from __future__ import annotations

import os
import subprocess

import pytest

import memops_testing as mt

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def rule_check(tmp_path_factory):
    exe = tmp_path_factory.mktemp("norm_fwd_rule") / "norm_fwd_rule"
    # PTX only and NVVM at -O0: the kernels are never launched, only their host stubs are named (~15-30 s on 2 cores).
    built = mt.nvcc_build(os.path.join(ROOT, "tests", "norm_fwd_rule.cu"), str(exe), "-gencode",
                          "arch=compute_90,code=compute_90", "-Xcicc", "-O0", "--expt-relaxed-constexpr")
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    return exe


@pytest.mark.parametrize("version", ["", "v65", "v62", "v63", "v66", "v67", "v48", "v57", "v58", "v60", "v61", "v45",
                                     "v44", "v29", "v23", "v21", "v4", "v3"])
def test_norm_fwd_rule(rule_check, version):
    run = subprocess.run([str(rule_check)], env={**os.environ, "JAX_MEMOPS_NORM_FWD": version}, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0 and run.stdout.rstrip().endswith("OK"), run.stdout[-3000:] + run.stderr[-3000:]
