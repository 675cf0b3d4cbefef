"""A/B of kernel versions on one GPU: `jax-memops bench --ops OPS --dirs DIRS --parts sweep` (DIRS: fwd by
default) once per value of an A/B environment variable (read once per process, hence one process per
version), then one table: TB/s (% of the copy measured in the same run) per version, XLA's TB/s, and
each version's speedup over the first version and over XLA.

    python3 benchmarks/softmax_ab.py --out ab [--versions v3 v5 v5-s1 v5-reg] [bench options...]
    python3 benchmarks/softmax_ab.py --var JAX_MEMOPS_NORM_FWD --ops layer_norm rms_norm \\
        --versions v3 v4 --out ab-norms          # (benchmarks/norms_ab.py: these defaults)
    python3 benchmarks/softmax_ab.py --var JAX_MEMOPS_GRID --versions persistent full --dirs fwd bwd \\
        --out ab-grid                            # the row kernels' grids, both directions
    python3 benchmarks/softmax_ab.py --var PYTHONPATH --versions /tmp/oldsite "" --ops layer_norm \\
        --out ab-builds                          # two builds: an older commit installed with
                                                 # `pip install --target /tmp/oldsite`, and this one

Variables: JAX_MEMOPS_SOFTMAX_FWD (cpp/softmax_fwd.cu: v2, v3-prefetch, v3 (the two-buffer bulk-copy cluster for
long rows), v5 (v9 without its 8-pack rows), v5-s1 / v5-reg (its one-buffer variants, forced for every
dtype), v7-512 (v5 with 512-thread CTAs in the bulk-copy cluster), v9-wide / v9-wide-512 (8-pack register
rows wherever they fit), v9 (v14 without its L2 two-pass rows), v14 (v20 with streaming loads and stores
in the register rows), v20 (v21 with streaming loads and stores in the 8-pack rows), v21 (v23 with 4 packs per
thread in the 16-bit sub-warp rows), v23..v26 (the short rows' steps to v27), v27 (v49 without its prefetch of each
bulk-copy CTA's next share into L2), v49 (v50's prefetch at the normal priority); anything else is v50, the default),
JAX_MEMOPS_SOFTMAX_L2_SHARE (the share of L2, in percent, that v14's 16-bit rows in flight may fill to take
the two-pass kernel; default 56, 0: never), JAX_MEMOPS_SOFTMAX_BWD (v9: the register
clusters' order of v9-v11, 8 CTAs of 1024 threads before 16 of 512; v9-1024: 1024-thread CTAs first; v35: the plans
before v37; v37: long rows on clusters of 5 packs per thread where those take fewer CTAs; v38: 4 or 5
packs by thread slots, 1024-thread clusters past 512-thread ones; v39: v38 with clusters that hold y alone
and read dy twice where v38's 512-thread clusters do not fit; v41: v39 with CTAs of any multiple of 32 threads
where they keep more rows in flight; anything else v42, the default: v41 only where those keep as many CTAs
resident),
JAX_MEMOPS_SOFTMAX_FWD_K (forces the bulk-copy cluster size; JAX_MEMOPS_SOFTMAX_PLAN_LOG=1 prints the
plans), JAX_MEMOPS_SOFTMAX_TIE (small: the bulk-copy planner's ties go to the smallest k, v12's rule;
anything else: to the smallest k that merges by messages), JAX_MEMOPS_SOFTMAX_PUSH (the clusters' merge, the
bulk-copy forward's (max, sum) and the backward's sum: 0 the cluster barrier, 1 messages, for every k;
anything else the default, messages from k = 4), JAX_MEMOPS_GRID (cpp/cuda_common.cuh grid_for: persistent /
full for every row kernel; anything else: each kernel's default), JAX_MEMOPS_NORM_FWD (cpp/norm_fwd.cu: v3
or v4 for every dtype, v21..v62 the rules before the default (v65), v63 and v66 candidates; the comment above its
NormFwd enum says what each names) and JAX_MEMOPS_NORM_BWD (cpp/norm_bwd.cu: the backward's versions, named in the
comment above its version switch; anything else the default). Extra options go to the bench (e.g. --dtypes float32 --cols 1024 131072)."""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys


def main(argv=None, var="JAX_MEMOPS_SOFTMAX_FWD", ops=("softmax",), versions=("v3", "v5"),
         out="softmax-ab") -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=out)
    p.add_argument("--var", default=var, help="the A/B environment variable")
    p.add_argument("--ops", nargs="+", default=list(ops))
    p.add_argument("--versions", nargs="+", default=list(versions))
    p.add_argument("--dirs", nargs="+", default=["fwd"], help="directions to bench (fwd, bwd, fwd+bwd)")
    args, bench_args = p.parse_known_args(argv)
    results = {}
    for v in args.versions:
        label = v or "unset"  # "": the variable set empty (each switch's default; PYTHONPATH: none)
        out = os.path.join(args.out, re.sub(r"[^\w.-]+", "_", label).strip("_") or "unset")
        cmd = [sys.executable, "-P", "-m", "jax_memops.cli", "bench", "--ops", *args.ops, "--dirs", *args.dirs,
               "--parts", "sweep", "--out", out, *bench_args]
        print(f"== {args.var}={v}: {' '.join(cmd[2:])}", flush=True)
        rc = subprocess.run(cmd, env=dict(os.environ, **{args.var: v})).returncode
        if rc != 0:
            print(f"version {v}: bench failed (rc={rc})", flush=True)
            continue
        with open(os.path.join(out, "results.json")) as f:
            results[label] = {(r["op"], r["direction"], r["dtype"], r["shape"][-1]): r
                              for r in json.load(f)["results"] if r["op"] in args.ops and r["direction"] in args.dirs}
    if not results:
        return 1
    versions = list(results)
    keys = sorted({k for r in results.values() for k in r})
    head = ["op", "dir", "dtype", "C"] + [f"{v} TB/s (%copy)" for v in versions] + ["XLA TB/s"]
    head += [f"{v}/{versions[0]}" for v in versions[1:]] + [f"{v}/XLA" for v in versions]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for key in keys:
        row = [key[0], key[1], key[2], str(key[3])]
        rs = [results[v].get(key) for v in versions]
        row += [f"{r['ours_gbps'] / 1e3:.2f} ({r['pct_of_copy']:.0f}%)" if r else "-" for r in rs]
        xla = next((r for r in rs if r), None)
        row.append(f"{xla['xla_gbps'] / 1e3:.2f}" if xla else "-")
        base = rs[0]
        row += [f"{base['ours_ms'] / r['ours_ms']:.3f}" if r and base else "-" for r in rs[1:]]
        row += [f"{r['xla_ms'] / r['ours_ms']:.2f}" if r else "-" for r in rs]
        lines.append("| " + " | ".join(row) + " |")
    table = "\n".join(lines)
    print(table)
    with open(os.path.join(args.out, "ab.md"), "w") as f:
        f.write(table + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
