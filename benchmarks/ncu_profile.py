"""Nsight Compute over chosen bench cases: ours and XLA's kernels, and the copy, one launch each.

Inputs, compilation and a warm-up run happen first; only then is the profiler started (cuProfilerStart
through the driver), so with `--profile-from-start off` ncu sees exactly the kernels of the timed calls,
in the order printed here:

    XLA_PYTHON_CLIENT_PREALLOCATE=false XLA_PYTHON_CLIENT_ALLOCATOR=platform \\
    ncu --profile-from-start off --clock-control none --section SpeedOfLight --section Occupancy \\
        --section WarpStateStats --section LaunchStats python3 benchmarks/ncu_profile.py \\
        softmax:fwd:float32:1024 layer_norm:bwd:bfloat16:8192:ours ...

Run it with XLA_PYTHON_CLIENT_PREALLOCATE=false XLA_PYTHON_CLIENT_ALLOCATOR=platform: with JAX's default
preallocated pool, ncu saves and restores the whole pool (~100 GB on an H200) around every replay pass
(measured: 5 kernels in 400 s, against 18 kernels in 18 s without the pool).

A case is op:direction:dtype:C[:ours|xla] (both by default) at rows = --elements / C; dtype may be x's and y's
(`bfloat16>float32`: the norms' `dtype=`, as `bench --out-dtypes`); `copy` adds the bench's copy (XOR over a uint32
buffer of 2^26 f32's bytes).
"""

from __future__ import annotations

import argparse
import ctypes

import jax
import jax.numpy as jnp

from jax_memops import bench


def _profiler(start: bool) -> None:
    lib = ctypes.CDLL("libcuda.so.1")
    rc = (lib.cuProfilerStart if start else lib.cuProfilerStop)()
    if rc != 0:
        raise RuntimeError(f"cuProfiler{'Start' if start else 'Stop'} returned {rc}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("cases", nargs="+", help="op:direction:dtype[>out dtype]:C[:ours|xla], or copy")
    p.add_argument("--elements", type=int, default=bench.DEFAULT_ELEMENTS)
    args = p.parse_args()
    calls = []  # (label, zero-argument call)
    key = jax.random.PRNGKey(0)
    for spec in args.cases:
        if spec == "copy":
            x = jnp.zeros((args.elements,), jnp.float32)
            calls.append(("copy f32", bench.copy_of(x)))
            continue
        op, direction, dtypes, cols, *which = spec.split(":")
        dtype, _, out_dtype = dtypes.partition(">")
        cols = int(cols)
        case = bench.Case(op, direction, dtype, (max(1, args.elements // cols), cols), out_dtype=out_dtype or None)
        key, sub = jax.random.split(key)
        ours, xla, fargs = bench.build(case, sub)
        for name, f in (("ours", ours), ("xla", xla)):
            if not which or which[0] == name:
                calls.append((f"{case.label} {name}", lambda f=f, a=fargs: f(*a)))
    for _, call in calls:  # compile and warm up outside the profiled range
        jax.block_until_ready(call())
    _profiler(True)
    for i, (label, call) in enumerate(calls):
        jax.block_until_ready(call())
        print(f"profiled call {i}: {label}", flush=True)
    _profiler(False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
