"""What XLA compiles for one of the bench's reference ops (jax_memops/reference.py): the fusions of the
optimized HLO and, per kernel of the PTX, its block size and the widths of its global loads and stores — read
from XLA's own dumps, to see how XLA reaches a figure the bench measures (e.g. the 16-bit softmax at C = 128).

  python3 benchmarks/xla_kernels.py --op softmax --dtype bfloat16 --cols 128 [--rows N] [--out DIR]

rows default to 2^26 / C, as the bench's. The dumps stay in DIR (default /tmp/xla_kernels); a summary is
printed as markdown. Needs no build of jax_memops (reference.py is loaded by its path).
"""

from __future__ import annotations

import argparse
import collections
import glob
import os
import re
import sys


def summarize_ptx(path):
    text = open(path).read()
    out = []
    for m in re.finditer(r"\.entry\s+(\w+)\s*\((.*?)\)\s*(.*?)\{", text, re.S):
        name, attrs = m.group(1), m.group(3)
        body_start = m.end()
        nxt = text.find(".entry", body_start)
        body = text[body_start:nxt if nxt > 0 else len(text)]
        ntid = re.search(r"\.(?:reqntid|maxntid)\s+([\d, ]+)", attrs)
        accesses = collections.Counter(re.findall(r"\b((?:ld|st)\.global(?:\.[a-z]+)*\.(?:v\d\.)?[a-z]\d+)", body))
        out.append((name, ntid.group(1).strip() if ntid else "?", dict(sorted(accesses.items())),
                    len(re.findall(r"\bshfl\.sync", body)), len(re.findall(r"\bbar\.sync|\bbarrier\.sync", body))))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--op", default="softmax", choices=["softmax", "layer_norm", "rms_norm"])
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--cols", type=int, default=128)
    ap.add_argument("--rows", type=int, default=0)
    ap.add_argument("--out", default="/tmp/xla_kernels")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                               f" --xla_dump_to={args.out} --xla_dump_hlo_as_text").strip()
    import importlib.util

    import jax
    import jax.numpy as jnp

    # reference.py alone (plain jax.numpy): no built extension needed.
    spec = importlib.util.spec_from_file_location(
        "reference", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "jax_memops", "reference.py"))
    reference = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(reference)

    rows = args.rows or (1 << 26) // args.cols
    dtype = jnp.dtype(args.dtype)
    x = jax.random.normal(jax.random.key(0), (rows, args.cols), jnp.float32).astype(dtype)
    fn = {"softmax": reference.softmax,
          "layer_norm": lambda t: reference.layer_norm(t, jnp.ones(t.shape[-1]), jnp.zeros(t.shape[-1])),
          "rms_norm": lambda t: reference.rms_norm(t, jnp.ones(t.shape[-1]))}[args.op]
    name = f"xla_{args.op}"

    def target(t):
        return fn(t)

    target.__name__ = name  # the dumps' module name: jit_<name>
    jax.block_until_ready(jax.jit(target)(x))
    print(f"**XLA's {args.op}, {args.dtype}, {rows} x {args.cols}** ({jax.devices()[0].device_kind}, jax "
          f"{jax.__version__})\n")
    for path in sorted(glob.glob(os.path.join(args.out, f"*jit_{name}*after_optimizations.txt"))):
        print(f"HLO `{os.path.basename(path)}`:\n")
        lines = open(path).read().splitlines()
        start = next((i for i, ln in enumerate(lines) if re.match(r"(%|ENTRY)", ln)), 0)
        for ln in lines[start:start + 80]:  # the computations, past the stack-frame tables
            print(f"    {ln if 'backend_config' in ln else ln[:300]}")  # a Triton fusion's tiles and warps
        print()
    dumped = sorted(glob.glob(os.path.join(args.out, "**", f"*{name}*"), recursive=True))
    print(f"({len(dumped)} dump files of this module: "
          f"{', '.join(sorted({os.path.basename(p).split(name)[-1] for p in dumped}))})\n")
    print("| PTX kernel | threads | global accesses (PTX count) | shfl | bar |\n|---|---|---|---|---|")
    for path in sorted(p for p in dumped if p.endswith(".ptx")):
        for kname, ntid, acc, shfl, bar in summarize_ptx(path):
            print(f"| {kname} | {ntid} | {', '.join(f'{k} x{v}' for k, v in acc.items())} | {shfl} | {bar} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
