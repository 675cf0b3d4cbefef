"""The CPU handlers' parallel work at 2^15..2^20 elements (1 to 32 pieces of kPieceElems), two cores or one: each
op's jitted forward timed alone, then alternating with XLA's formulation from `jax_memops.reference` (whose pool
threads then run between our calls), medians of `bench.time_interleaved` (calls filling 10 ms, 9 timings).

Two versions of the library, each installed with `pip install --target DIR`, run alternately with PYTHONPATH=DIR:

    for r in 1 2 3; do for v in old new; do
        PYTHONPATH=/tmp/$v python3 benchmarks/cpu_pool_ab.py > out/${v}_$r.txt            # both cores
        PYTHONPATH=/tmp/$v taskset -c 0 python3 benchmarks/cpu_pool_ab.py > out/${v}_1core_$r.txt
    done; done
    python3 benchmarks/cpu_pool_ab.py --old out/old_[0-9].txt --new out/new_[0-9].txt

`--gap US` times instead each call alone after US µs of busy waiting (XLA's pool threads sleep after ~20-30 µs
without work, so a gap of 50 finds them asleep, 0 spinning): each op and size's median of 5 means of >= 20 calls;
its lines read `gapUS op  T(2^15) ... T(2^20)` (µs).

`--steps` times instead the bench's f32 cases at 64 x 1000 (two pieces), forward, backward and training step, ours
and XLA's alternating; its lines read `op  fwd OURS/XLA  bwd OURS/XLA  fwd+bwd OURS/XLA` (µs).
"""

from __future__ import annotations

import argparse
import re
import statistics

_LINE = re.compile(r"(\S+ 2\^\d+) alone (\S+) interleaved (\S+) xla (\S+)")


def _ops(lib) -> dict:
    """GELU (at scalar scale and bias), softmax and RMSNorm from `lib`: jax_memops, or its XLA formulations."""
    return {"gelu": lambda x: lib.scale_bias_gelu(x, 1.5, 0.25), "softmax": lib.softmax, "rms": lib.rms_norm}


def _rows(lg: int):
    """f32 rows of 1000 elements, 2^lg elements rounded down to whole rows."""
    import jax
    import jax.numpy as jnp

    return (2 * jax.random.normal(jax.random.key(1), ((1 << lg) // 1000, 1000))).astype(jnp.float32)


def measure() -> None:
    import jax

    import jax_memops as jm
    from jax_memops import bench, reference

    ours, xla = _ops(jm), _ops(reference)
    for op in ours:
        for lg in (15, 16, 17, 18, 20):
            x = _rows(lg)
            fo, fx = jax.jit(ours[op]), jax.jit(xla[op])
            (alone,) = bench.time_interleaved([lambda: fo(x)], None, 9)
            mixed, theirs = bench.time_interleaved([lambda: fo(x), lambda: fx(x)], None, 9)
            print(f"{op} 2^{lg} alone {alone * 1e3:.1f} interleaved {mixed * 1e3:.1f} xla {theirs * 1e3:.1f}",
                  flush=True)


def measure_gap(gap_us: float) -> None:
    import time

    import jax

    import jax_memops as jm

    for op, f in (_ops(jm) | {"ln": jm.layer_norm}).items():
        row = []
        for lg in (15, 16, 17, 18, 19, 20):
            x = _rows(lg)
            fj = jax.jit(f)
            for _ in range(50):
                jax.block_until_ready(fj(x))
            means = []
            for _ in range(5):
                total, calls = 0.0, max(20, 2000 >> max(0, lg - 15))
                for _ in range(calls):
                    t0 = time.perf_counter()
                    while time.perf_counter() - t0 < gap_us * 1e-6:
                        pass
                    t1 = time.perf_counter()
                    jax.block_until_ready(fj(x))
                    total += time.perf_counter() - t1
                means.append(total / calls * 1e6)
            row.append(f"{statistics.median(means):.1f}")
        print(f"gap{gap_us:g}", op, " ".join(row), flush=True)


def measure_steps() -> None:
    import jax

    from jax_memops import bench

    for op in ("rms_norm", "layer_norm", "gelu", "softmax"):
        cells = []
        for d in ("fwd", "bwd", "fwd+bwd"):
            ours, xla, args = bench.build(bench.Case(op, d, "float32", (64, 1000)), jax.random.key(0))
            t_ours, t_xla = bench.time_interleaved([lambda: ours(*args), lambda: xla(*args)], None, 9)
            cells.append(f"{d} {t_ours * 1e3:.1f}/{t_xla * 1e3:.1f}")
        print(op, "  ".join(cells), flush=True)


def load(paths: list[str]) -> dict[str, list[tuple[float, ...]]]:
    out: dict[str, list[tuple[float, ...]]] = {}
    for p in paths:
        for line in open(p):
            m = _LINE.match(line)
            if m:
                out.setdefault(m.group(1), []).append(tuple(float(v) for v in m.groups()[1:]))
    return out


def compare(old: list[str], new: list[str]) -> None:
    a, b = load(old), load(new)
    print("| case | alone: old / new µs | × | with XLA: old / new µs | × | XLA over new |")
    print("|---|---|---|---|---|---|")
    for k in a:
        ao, an = (statistics.median(r[0] for r in d[k]) for d in (a, b))
        io, i_n = (statistics.median(r[1] for r in d[k]) for d in (a, b))
        xn = statistics.median(r[2] / r[1] for r in b[k])
        print(f"| {k} | {ao:.1f} / {an:.1f} | {ao / an:.2f} | {io:.1f} / {i_n:.1f} | {io / i_n:.2f} | {xn:.2f} |")


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", action="store_true", help="the bench's cases at 64 x 1000 instead")
    p.add_argument("--gap", type=float, metavar="US", help="each call alone after US µs of busy waiting instead")
    p.add_argument("--old", nargs="+", metavar="FILE", help="outputs of the version before")
    p.add_argument("--new", nargs="+", metavar="FILE", help="outputs of the version after")
    args = p.parse_args()
    if bool(args.old) != bool(args.new):
        p.error("--old and --new go together")
    if args.old:
        compare(args.old, args.new)
    elif args.gap is not None:
        measure_gap(args.gap)
    else:
        measure_steps() if args.steps else measure()
