"""Throughput against the row count around whole rounds of a persistent or multi-wave grid: does the last,
partial round of rows cost a round's time? One process, the bench's timing (ours, XLA and the copy
interleaved, median of --reps timings of --iters calls each):

    python3 benchmarks/rounds.py softmax:fwd:float32:50257:1320,1335,1452 layer_norm:fwd:bfloat16:1024:63360,65536
    python3 benchmarks/rounds.py --timing device layer_norm:fwd:bfloat16:12288:5280,5461,5808

A case is op:direction:dtype:C:rows[,rows...]. Each row count prints a line: ours and the copy in TB/s, ours
as % of the copy, XLA's TB/s, and microseconds per row (flat per-row time across a partial round: the
round costs by its rows; a step: it costs a whole round).
"""

from __future__ import annotations

import argparse

import jax

from jax_memops import bench


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("cases", nargs="+", help="op:direction:dtype:C:rows[,rows...]")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--timing", choices=bench.TIMINGS, default="wall", help="as the bench's --timing")
    args = p.parse_args()
    key = jax.random.PRNGKey(0)
    print("| case | rows | ours TB/s | copy TB/s | % copy | XLA TB/s | us per row |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for spec in args.cases:
        op, direction, dtype, cols, rows = spec.split(":")
        for r in (int(v) for v in rows.split(",")):
            key, sub = jax.random.split(key)
            res = bench.run_case(bench.Case(op, direction, dtype, (r, int(cols))), sub, args.iters, args.reps,
                                 args.timing)
            print(f"| {op} {direction} {dtype} {cols} | {r} | {res.gbps(res.ours_ms) / 1e3:.2f} | "
                  f"{res.copy_gbps / 1e3:.2f} | {res.pct_of_copy:.1f} | {res.gbps(res.xla_ms) / 1e3:.2f} | "
                  f"{res.ours_ms * 1e3 / r:.4f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
