"""How many partial rows should the backward kernels write? An A/B of the workspace rules (RESULTS.md "v30").

The backward's grid is its workspace's partial rows P (jax_memops._primitive.partial_rows). Before v30 the norms took
GELU's rule — 264 capped at one partial row per 256 bytes of each column of x, never below 132 — so 16-bit rows of
C >= 4096 and f32 rows of C >= 8192 got P = 132 (one 512-thread block per SM, whose row barriers stall the whole SM)
and some shapes 133..247 (a partial second wave). Variants, each traced under its own setting (the lowering reads it
when it traces), then timed interleaved in one process by device time (the bench's --timing device), each one's
gradients checked against the first's:
  v29       JAX_MEMOPS_NORM_PARTIALS=v29: the rule before
  default   v30's rule (264 where a row's team has <= 256 threads and the rows allow, else 132)
  teams=N   the default rule at PARTIALS_BYTES_TEAMS = N (what "the rows allow": rows * itemsize / N >= 248)
  bytes=N   the rule before (GELU's) at PARTIALS_BYTES = N (e.g. 64: 264 wherever the rows allow)
  target=N  the rule before (GELU's) at PARTIALS_TARGET = N (the most partial rows)
  team_block=N  the default rule, 264 where a row's team (by its estimate) has <= N threads (TEAM_BLOCK)
Settings joined by commas apply together (team_block=1024,teams=32).
GELU (--ops gelu) has one rule, so only bytes= and target= change it. The kernels' own versions
(JAX_MEMOPS_NORM_BWD, read once per process) take one process each.

    python3 benchmarks/partials_ab.py [--variants v29 default bytes=64] [--ops ...] [--cols ...] [--dirs ...]
        [--dtypes ...] [--elements N]  (a GPU)
"""

from __future__ import annotations

import argparse
import os

import jax
import jax.numpy as jnp

from jax_memops import _primitive, bench


def _set(variant: str) -> None:
    os.environ.pop("JAX_MEMOPS_NORM_PARTIALS", None)
    _primitive.PARTIALS_BYTES, _primitive.PARTIALS_TARGET, _primitive.PARTIALS_BYTES_TEAMS = 256, 264, 128
    _primitive.TEAM_BLOCK = 256
    for part in variant.split(","):  # settings joined by commas apply together
        name, _, value = part.partition("=")
        if part == "v29" or name in ("bytes", "target"):
            os.environ["JAX_MEMOPS_NORM_PARTIALS"] = "v29"
        if name == "teams":
            _primitive.PARTIALS_BYTES_TEAMS = int(value)
        elif name == "bytes":
            _primitive.PARTIALS_BYTES = int(value)
        elif name == "team_block":
            _primitive.TEAM_BLOCK = int(value)
        elif name == "target":
            _primitive.PARTIALS_TARGET = int(value)
        elif part not in ("v29", "default"):
            raise SystemExit(f"unknown variant {variant!r}")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--variants", nargs="+", default=["v29", "default"], help="the first is the base")
    p.add_argument("--ops", nargs="+", default=["layer_norm", "rms_norm"], choices=["layer_norm", "rms_norm", "gelu"])
    p.add_argument("--cols", type=int, nargs="+", default=[2048, 3072, 4096, 5120, 8192, 12288])
    p.add_argument("--dirs", nargs="+", default=["bwd", "fwd+bwd"])
    p.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"], choices=["float32", "bfloat16", "float16"])
    p.add_argument("--elements", type=int, default=bench.DEFAULT_ELEMENTS, help="per tensor: rows = elements // C")
    args = p.parse_args()
    vs = args.variants
    print("| op | dir | dtype | C | P per variant | " + " | ".join(f"{v}: ms" for v in vs) + " | "
          + " | ".join(f"{v} / {vs[0]}" for v in vs[1:]) + " | max rel diff |")
    print("|---" * (5 + 2 * len(vs)) + "|")
    for op in args.ops:
        for direction in args.dirs:
            for dtype in args.dtypes:
                for c in args.cols:
                    case = bench.Case(op, direction, dtype, (args.elements // c, c))
                    itemsize = jnp.dtype(bench.DTYPES[dtype]).itemsize
                    calls, outs, ps = [], [], []
                    for v in vs:
                        _set(v)
                        ours, _, a = bench.build(case, jax.random.key(c))
                        outs.append(jax.block_until_ready(ours(*a)))  # traced under v
                        calls.append(lambda f=ours, a=a: f(*a))
                        ps.append(_primitive.partial_rows(case.shape[0], 1, itemsize, None if op == "gelu" else c))
                    _set("default")
                    diff = max(bench.max_rel_diff(o, outs[0]) for o in outs[1:])
                    ms = bench.time_interleaved(calls, iters=20, reps=7, timing="device")
                    print(f"| {op} | {direction} | {dtype} | {c} | {' / '.join(map(str, ps))} | "
                          + " | ".join(f"{t:.4f}" for t in ms) + " | "
                          + " | ".join(f"{ms[0] / t:.3f}" for t in ms[1:]) + f" | {diff:.1e} |", flush=True)


if __name__ == "__main__":
    main()
