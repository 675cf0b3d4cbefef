"""What a custom call costs per call beyond its kernel, in a jitted loop (RESULTS.md "v23").

The bench (jax_memops/bench.py) times `iters` back-to-back jitted calls: device throughput, launch gaps
included. benchmarks/norm_fwd_ab.cu times the same kernels by CUDA events inside one process and read them
8-14% faster than the bench did, where XLA's copy read the same in both. This script separates the parts:
per case (op, dtype, C; rows = 2^26 / C) and for ours, XLA's jitted formulation and the bench's copy,
  single   the bench's loop: one op per jitted call (µs per call; enqueue: the host's time per call before
           the final block_until_ready — a loop whose enqueue time reaches its device time is host-bound);
  chain    K ops chained inside one jitted call (y = op(y), K = 8): µs per op without a call's own cost
           (not for the copy: XLA would fuse a chain of elementwise ops into one kernel).
Each configuration in its own process, as XLA_FLAGS are read once: the default, and XLA's command buffers off.

    python3 benchmarks/dispatch_gap.py [--out DIR]     (a GPU; prints one table per configuration;
                                                        DISPATCH_GAP_ELEMS: elements per case, default 2^26)
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

CASES = [("layer_norm", "bfloat16", 1024), ("layer_norm", "bfloat16", 12288), ("layer_norm", "float32", 768),
         ("rms_norm", "bfloat16", 4096), ("softmax", "float32", 1024), ("softmax", "bfloat16", 50257)]
CHAIN = 8
CONFIGS = {"default": "", "no-command-buffer": "--xla_gpu_enable_command_buffer="}


def _measure() -> None:
    import jax
    import jax.numpy as jnp

    import jax_memops as jm
    from jax_memops import reference
    from jax_memops.bench import copy_of

    def timed(f, args, iters=100, reps=15):
        jax.block_until_ready(f(*args))
        jax.block_until_ready(f(*args))
        loop, enq = [], []
        for _ in range(reps):
            t0 = time.perf_counter()
            for _ in range(iters):
                r = f(*args)
            t1 = time.perf_counter()
            jax.block_until_ready(r)
            t2 = time.perf_counter()
            loop.append((t2 - t0) / iters * 1e6)
            enq.append((t1 - t0) / iters * 1e6)
        return statistics.median(loop), statistics.median(enq)

    def ops(op):
        if op == "softmax":
            return (lambda x, s, b: jm.softmax(x)), (lambda x, s, b: reference.softmax(x))
        if op == "rms_norm":
            return (lambda x, s, b: jm.rms_norm(x, s)), (lambda x, s, b: reference.rms_norm(x, s))
        return (lambda x, s, b: jm.layer_norm(x, s, b)), (lambda x, s, b: reference.layer_norm(x, s, b))

    def chain(f):
        def g(x, s, b):
            for _ in range(CHAIN):
                x = f(x, s, b)
            return x
        return g

    print("| case | ours µs/call (enqueue) | ours µs/op in a chain | XLA µs/call (enqueue) | XLA µs/op in a chain "
          "| copy µs/call (enqueue) |")
    print("|---|---|---|---|---|---|")
    key = jax.random.key(0)
    for op, dtype, cols in CASES:
        rows = int(os.environ.get("DISPATCH_GAP_ELEMS", 1 << 26)) // cols
        kx, ks, kb, key = jax.random.split(key, 4)
        x = jax.random.normal(kx, (rows, cols), jnp.float32).astype(dtype)
        s = 1.0 + 0.1 * jax.random.normal(ks, (cols,), jnp.float32)
        b = 0.1 * jax.random.normal(kb, (cols,), jnp.float32)
        ours, xla = ops(op)
        cells = []
        for f in (ours, xla):
            one, one_enq = timed(jax.jit(f), (x, s, b))
            many, _ = timed(jax.jit(chain(f)), (x, s, b), iters=20)
            cells += [f"{one:.1f} ({one_enq:.1f})", f"{many / CHAIN:.1f}"]
        copy = copy_of(x)
        one, one_enq = timed(lambda: copy(), ())
        cells += [f"{one:.1f} ({one_enq:.1f})"]
        print(f"| {op} {dtype} {rows}x{cols} | " + " | ".join(cells) + " |", flush=True)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=None, help="a directory for one markdown file per configuration")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        _measure()
        return 0
    rc = 0
    for name, flags in CONFIGS.items():
        env = dict(os.environ, XLA_FLAGS=(os.environ.get("XLA_FLAGS", "") + " " + flags).strip())
        run = subprocess.run([sys.executable, os.path.abspath(__file__), "--child"], env=env, capture_output=True,
                             text=True)
        text = f"**{name}** (XLA_FLAGS={env['XLA_FLAGS'] or '(none)'})\n\n{run.stdout}"
        print(text + (run.stderr[-2000:] if run.returncode else ""), flush=True)
        rc = rc or run.returncode
        if args.out:
            os.makedirs(args.out, exist_ok=True)
            with open(os.path.join(args.out, f"dispatch_gap_{name}.md"), "w") as fh:
                fh.write(text)
    return rc


if __name__ == "__main__":
    sys.exit(main())
