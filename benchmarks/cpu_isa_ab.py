"""The CPU handlers' builds (JAX_MEMOPS_CPU_ISA) against each other and XLA, one core: each op's jitted forward and
training step (jit of the VJP), ours and XLA's jnp formulation in the same process, median of --calls calls.

Each build runs in its own process (the build is picked at import); alternate them and repeat, then aggregate:

    export MALLOC_ARENA_MAX=1 MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=4294967296 \\
           MALLOC_TOP_PAD_=268435456
    for r in 1 2 3; do for isa in avx512 avx2 baseline; do
        JAX_MEMOPS_CPU_ISA=$isa taskset -c 0 python3 benchmarks/cpu_isa_ab.py > out/isa_${isa}_$r.txt
    done; done
    python3 benchmarks/cpu_isa_ab.py --table out/isa_*.txt

Two versions of the library (each installed with `pip install --target DIR`, run with PYTHONPATH=DIR) against each
other: name the outputs `<version>_<isa>_<round>.txt` and aggregate with `--compare OLD NEW out/*.txt`.

The malloc settings keep freed buffers mapped. Without them, XLA's CPU runtime gets each call's 16 MB outputs and
temporaries as fresh pages from the kernel, and a call's time depends on how many of them fault (seen: 3270 faults
and +6 ms in a training step of f32 softmax at 4096 x 1024, 0 in the next process), for ours and XLA's alike.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import statistics
import time

ISAS = ("baseline", "avx2", "avx512")
OPS = ("softmax", "layer_norm", "rms_norm", "gelu")
DTYPES = ("float32", "bfloat16", "float16")
_LINE = re.compile(r"(\w+)\s+(\w+)\s+fwd\s+([\d.]+) xla\s+([\d.]+) \| fwd\+bwd\s+([\d.]+) xla\s+([\d.]+)")


def measure(rows: int, cols: int, calls: int) -> None:
    import jax
    import jax.numpy as jnp
    import numpy as np

    import jax_memops as jm

    f32 = jnp.float32

    def xla_norm(x, s, b, rms=False):
        x32 = x.astype(f32)
        d = x32 if rms else x32 - x32.mean(-1, keepdims=True)
        y = d * jax.lax.rsqrt((d * d).mean(-1, keepdims=True) + 1e-5) * s
        return (y if rms else y + b).astype(x.dtype)

    ops = {
        "softmax": (lambda x, s, b: jm.softmax(x), lambda x, s, b: jax.nn.softmax(x.astype(f32)).astype(x.dtype)),
        "layer_norm": (lambda x, s, b: jm.layer_norm(x, s, b, epsilon=1e-5), xla_norm),
        "rms_norm": (lambda x, s, b: jm.rms_norm(x, s, epsilon=1e-5), lambda x, s, b: xla_norm(x, s, b, True)),
        "gelu": (jm.scale_bias_gelu,
                 lambda x, s, b: jax.nn.gelu(x.astype(f32) * s + b, approximate=True).astype(x.dtype)),
    }

    def median_ms(f, *args):
        jax.block_until_ready(f(*args))
        times = []
        for _ in range(calls):
            t0 = time.perf_counter()
            jax.block_until_ready(f(*args))
            times.append(time.perf_counter() - t0)
        return float(np.median(times)) * 1e3

    k = jax.random.split(jax.random.key(0), 3)
    x32 = jax.random.normal(k[0], (rows, cols), f32)
    s = 1 + 0.1 * jax.random.normal(k[1], (cols,), f32)
    b = 0.1 * jax.random.normal(k[2], (cols,), f32)
    print("isa", jm.build_info()["cpu_isa"])
    for dtype in DTYPES:
        x, g = x32.astype(dtype), (0.5 * x32).astype(dtype)
        for name in OPS:
            times = []
            for f in ops[name]:
                step = jax.jit(lambda x, s, b, g, f=f: jax.vjp(f, x, s, b)[1](g))
                times += [median_ms(jax.jit(f), x, s, b), median_ms(step, x, s, b, g)]
            print(f"{name:10s} {dtype:8s} fwd {times[0]:6.2f} xla {times[2]:6.2f} | "
                  f"fwd+bwd {times[1]:6.2f} xla {times[3]:6.2f}", flush=True)


def _parse(paths: list[str], key) -> dict:
    """Each op's four times (fwd, XLA's fwd, fwd+bwd, XLA's fwd+bwd) per process, by (op, dtype, isa, key(path))."""
    runs = collections.defaultdict(list)
    for path in paths:
        with open(path) as f:
            isa = None
            for line in f:
                if line.startswith("isa "):
                    isa = line.split()[1]
                elif (m := _LINE.match(line)) and isa:
                    runs[(m.group(1), m.group(2), isa, key(path))].append(tuple(map(float, m.groups()[2:])))
    return runs


def table(paths: list[str]) -> None:
    """Medians over the processes of each build; XLA's best process (its 16-bit programs run at one of two speeds per
    process, e.g. RMSNorm's f16 forward at 2.6 or 15 ms, whichever build of ours runs beside them)."""
    parsed = _parse(paths, lambda path: None)
    runs = {(op, dtype, isa): times for (op, dtype, isa, _), times in parsed.items()}
    print("| op | dtype | fwd ms: baseline / AVX2 / AVX-512 | XLA best | fwd+bwd ms: baseline / AVX2 / AVX-512 | XLA best |"
          " AVX-512 over AVX2: fwd, fwd+bwd |")  # XLA: its best process
    print("|---|---|---|---|---|---|---|")
    for op in OPS:
        for dtype in DTYPES:
            med = {isa: [statistics.median(r[i] for r in runs[(op, dtype, isa)]) for i in range(4)] for isa in ISAS}
            xla = [min(r[i] for isa in ISAS for r in runs[(op, dtype, isa)]) for i in (1, 3)]
            fwd, step = (" / ".join(f"{med[isa][i]:.2f}" for isa in ISAS) for i in (0, 2))
            gain = f"{med['avx2'][0] / med['avx512'][0]:.2f}×, {med['avx2'][2] / med['avx512'][2]:.2f}×"
            print(f"| {op} | {dtype} | {fwd} | {xla[0]:.2f} | {step} | {xla[1]:.2f} | {gain} |")


def compare(old: str, new: str, paths: list[str]) -> None:
    """Per build: each version's median over its processes, forward and training step, and XLA's best process."""
    runs = _parse(paths, lambda path: os.path.basename(path).split("_")[0])
    for isa in ISAS:
        counts = {v: len({p for p in paths if os.path.basename(p).startswith(f"{v}_{isa}_")}) for v in (old, new)}
        if not all(counts.values()):
            continue
        print(f"\n{isa} ({counts[old]} / {counts[new]} processes): medians, ms\n")
        print(f"| op | dtype | fwd: {old} → {new} | training step: {old} → {new} | XLA best: fwd, step |")
        print("|---|---|---|---|---|")
        for op in OPS:
            for dtype in DTYPES:
                if not all(runs[(op, dtype, isa, v)] for v in (old, new)):
                    continue  # a process still running
                cells = []
                for i in (0, 2):
                    a, b = (statistics.median(r[i] for r in runs[(op, dtype, isa, v)]) for v in (old, new))
                    cells.append(f"{a:.2f} → {b:.2f} ({a / b:.2f}×)")
                xla = [min(r[i] for v in (old, new) for r in runs[(op, dtype, isa, v)]) for i in (1, 3)]
                print(f"| {op} | {dtype} | {cells[0]} | {cells[1]} | {xla[0]:.2f}, {xla[1]:.2f} |")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=4096)
    p.add_argument("--cols", type=int, default=1024)
    p.add_argument("--calls", type=int, default=15)
    p.add_argument("--table", nargs="+", metavar="FILE", help="aggregate earlier runs' outputs instead")
    p.add_argument("--compare", nargs="+", metavar="ARG", help="OLD NEW FILE...: two versions' outputs, per build")
    args = p.parse_args()
    if args.compare:
        compare(args.compare[0], args.compare[1], args.compare[2:])
    elif args.table:
        table(args.table)
    else:
        measure(args.rows, args.cols, args.calls)


if __name__ == "__main__":
    main()
