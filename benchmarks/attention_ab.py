"""The Flax drop-in attention functions against Flax's own, jitted, forward and gradient, on whatever device JAX has:
`jm.nnx.dot_product_attention` (the weights written, the softmax by jm.softmax) against `nnx.dot_product_attention`
(which, in Flax 0.12.8, calls `jax.nn.dot_product_attention` where the dropout rate is 0 and no module is given: on
a GPU possibly cuDNN's fused attention) and against its explicit path (the same function with a dropout rate that
is not applied: deterministic=True), and `jm.linen.dot_product_attention` against `flax.linen`'s.

    python3 benchmarks/attention_ab.py                         # examples/gpt.py's GPU shapes: 64 x 256, 6 heads of 64
    python3 benchmarks/attention_ab.py --shape 2 1024 8 64 --dtypes bfloat16 --timing device

Prints Flax's version, then per case the median ms per call of each function and ours' speedup over each.
"""

from __future__ import annotations

import argparse

import flax
import jax
import jax.numpy as jnp
from flax import linen as nn
from flax import nnx

import jax_memops as jm
from jax_memops.bench import time_interleaved


def functions(causal: bool):
    kw = {"is_causal": True} if causal else {}

    def linen_kw(q):
        return {"mask": nn.make_causal_mask(jnp.zeros(q.shape[:2]), dtype=bool)} if causal else {}

    return {
        "jm.nnx": lambda q, k, v: jm.nnx.dot_product_attention(q, k, v, **kw),
        "nnx (its default path)": lambda q, k, v: nnx.dot_product_attention(q, k, v, **kw),
        # a dropout rate, not applied (deterministic), takes Flax's explicit path: the weights written
        "nnx explicit": lambda q, k, v: nnx.dot_product_attention(q, k, v, dropout_rate=0.1, deterministic=True, **kw),
        "jm.linen": lambda q, k, v: jm.linen.dot_product_attention(q, k, v, **linen_kw(q)),
        "linen": lambda q, k, v: nn.dot_product_attention(q, k, v, **linen_kw(q)),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shape", type=int, nargs=4, default=(64, 256, 6, 64), metavar=("B", "L", "H", "D"))
    p.add_argument("--dtypes", nargs="+", default=("float32", "bfloat16"))
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--timing", choices=("wall", "device"), default="wall")
    args = p.parse_args()
    print(f"flax {flax.__version__}, jax {jax.__version__}, {jax.devices()[0].device_kind}, shape {args.shape}")
    for dtype in args.dtypes:
        q, k, v = (0.5 * jax.random.normal(s, args.shape, jnp.dtype(dtype)) for s in jax.random.split(jax.random.key(0), 3))
        for causal in (False, True):
            fns = functions(causal)
            for direction in ("fwd", "grad"):
                jitted = {n: jax.jit(f if direction == "fwd" else jax.grad(
                    lambda q, k, v, f=f: f(q, k, v).astype(jnp.float32).sum(), (0, 1, 2))) for n, f in fns.items()}
                ms = dict(zip(jitted, time_interleaved([lambda f=f: f(q, k, v) for f in jitted.values()],
                                                       args.iters, args.reps, args.timing)))
                cells = "  ".join(f"{n} {t:.3f}" for n, t in ms.items())
                ratios = (f"jm.nnx over nnx {ms['nnx (its default path)'] / ms['jm.nnx']:.2f}x, over nnx explicit "
                          f"{ms['nnx explicit'] / ms['jm.nnx']:.2f}x; jm.linen over linen "
                          f"{ms['linen'] / ms['jm.linen']:.2f}x")
                print(f"{dtype:8s} {'causal' if causal else 'full  '} {direction:4s} ms: {cells} | {ratios}",
                      flush=True)


if __name__ == "__main__":
    main()
