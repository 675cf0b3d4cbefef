"""The Flax drop-in norm layers against Flax's own, jitted, forward and training step, on whatever device JAX has:
`jm.nnx.LayerNorm` / `RMSNorm` against `nnx.LayerNorm` / `RMSNorm`, in the dtype configurations a model meets:

    widening   bfloat16 x, float32 params, dtype=None: Flax's output is float32; the kernels read x as bfloat16
               and write y as float32 (the norms' `dtype`; until the twelfth session x was converted to float32
               first, one more pass over x than Flax's fused code: RESULTS "eleventh session", "twelfth session")
    bf16       bfloat16 x, float32 params, dtype=bfloat16 (examples/gpt.py): the params rounded, x stays bfloat16
    f32        float32 x and params

each over the last axis and over the last two (reduction_axes=(-2, -1)). The training step is the gradient of
sum(y * w) with respect to x and the params (w fixed, in y's dtype): the forward and the backward kernels.

    python3 benchmarks/norm_layers_ab.py --timing device                 # a GPU: x of 2^26 elements
    python3 benchmarks/norm_layers_ab.py --elements 4194304 --iters 5    # a CPU

Prints per case the median ms per call of each layer, ours' speedup over Flax's (> 1: ours faster), and the
largest difference of the outputs relative to Flax's largest output (the two must agree first). In the widening
configuration also ours on x converted to float32 first (the path before the norms' `dtype=`), timed in the same
interleaving, and how much faster the current path is.
"""

from __future__ import annotations

import argparse

import flax
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

import jax_memops as jm
from jax_memops.bench import time_interleaved

CONFIGS = {"widening": (jnp.bfloat16, jnp.float32, None), "bf16": (jnp.bfloat16, jnp.float32, jnp.bfloat16),
           "f32": (jnp.float32, jnp.float32, None)}
LAYERS = {"LayerNorm": (jm.nnx.LayerNorm, nnx.LayerNorm), "RMSNorm": (jm.nnx.RMSNorm, nnx.RMSNorm)}
TOLERANCE = {jnp.dtype(jnp.float32): 1e-4, jnp.dtype(jnp.bfloat16): 2e-2}


def pair(ours, theirs, features, options):
    """Flax's layer with random params and ours with the same state."""
    ref = theirs(features, rngs=nnx.Rngs(0), **options)
    state = nnx.state(ref)
    rng = np.random.default_rng(1)
    nnx.update(ref, jax.tree.map(lambda p: jnp.asarray(rng.normal(1.0, 0.5, p.shape), p.dtype), state))
    mine = ours(features, rngs=nnx.Rngs(0), **options)
    nnx.update(mine, nnx.state(ref))
    return mine, ref


def programs(layer, x, w, widen=False):
    """(jitted forward, jitted training step) of an NNX layer, each taking (state, x). widen: x converted to float32
    before the layer (what the jm layers did in the widening case until the twelfth session)."""
    graph, state = nnx.split(layer)
    call = lambda s, x: nnx.merge(graph, s)(x.astype(jnp.float32) if widen else x)  # noqa: E731
    fwd = jax.jit(call)
    step = jax.jit(jax.grad(lambda s, x: jnp.sum((call(s, x) * w).astype(jnp.float32)), (0, 1)))
    return state, fwd, step


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--elements", type=int, default=2**26)
    p.add_argument("--cols", type=int, nargs="+", default=(1024, 4096))
    p.add_argument("--configs", nargs="+", choices=CONFIGS, default=list(CONFIGS))
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--timing", choices=("wall", "device"), default="wall")
    args = p.parse_args()
    print(f"flax {flax.__version__}, jax {jax.__version__}, {jax.devices()[0].device_kind}, "
          f"{args.elements} elements, timing {args.timing}")
    for c in args.cols:
        shape = (args.elements // (16 * c), 16, c)
        for config in args.configs:
            x_dtype, param_dtype, dtype = CONFIGS[config]
            x = 2.0 * jax.random.normal(jax.random.key(0), shape, jnp.float32) + 0.5
            x = x.astype(x_dtype)
            for axes, features in ((-1, c), ((-2, -1), c)):
                options = dict(param_dtype=param_dtype, dtype=dtype, reduction_axes=axes, epsilon=1e-5)
                for name, (ours, theirs) in LAYERS.items():
                    mine, ref = pair(ours, theirs, features, options)
                    y_ref = ref(x)
                    w = jax.random.normal(jax.random.key(2), shape, jnp.float32).astype(y_ref.dtype)
                    (s1, f1, g1), (s2, f2, g2) = programs(mine, x, w), programs(ref, x, w)
                    y = f1(s1, x)
                    assert y.dtype == y_ref.dtype, (y.dtype, y_ref.dtype)
                    ref32 = np.asarray(y_ref, np.float32)
                    diff = float(np.max(np.abs(np.asarray(y, np.float32) - ref32)) / max(np.max(np.abs(ref32)), 1.0))
                    assert diff <= TOLERANCE[jnp.dtype(y.dtype)], f"{name} {config}: differs from Flax by {diff:.3g}"
                    calls = [lambda: f1(s1, x), lambda: f2(s2, x), lambda: g1(s1, x), lambda: g2(s2, x)]
                    widening = config == "widening"
                    if widening:  # the same layer on x converted first: the path before the norms' dtype=
                        s0, f0, g0 = programs(mine, x, w, widen=True)
                        calls += [lambda: f0(s0, x), lambda: g0(s0, x)]
                    ms = time_interleaved(calls, args.iters, args.reps, args.timing)
                    before = (f" | converting first: fwd {ms[4]:.3f} step {ms[5]:.3f} (now {ms[4] / ms[0]:.2f}x, "
                              f"{ms[5] / ms[2]:.2f}x)") if widening else ""
                    print(f"{name:9s} C={c:<5d} axes={str(axes):8s} {config:8s} out {jnp.dtype(y.dtype).name:8s} "
                          f"fwd ms: jm {ms[0]:.3f} flax {ms[1]:.3f} ({ms[1] / ms[0]:.2f}x) | step ms: "
                          f"jm {ms[2]:.3f} flax {ms[3]:.3f} ({ms[3] / ms[2]:.2f}x) | max diff {diff:.1e}{before}",
                          flush=True)


if __name__ == "__main__":
    main()
