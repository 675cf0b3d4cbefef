"""Every CPU op's outputs and gradients over shapes that take each path of the parameter gradients' sums (v92,
RESULTS.md "The CPU handlers, v92"): `python3 bits.py OUT.npz` on one build, then `python3 bits.py --compare A B`
prints how many of them differ in any bit. Run with PYTHONPATH=DIR of a `pip install --target DIR` build."""
import sys

import numpy as np


def outputs():
    import jax
    import jax.numpy as jnp
    import jax_memops as jm

    ops = {
        "gelu": lambda x, s, b: jm.scale_bias_gelu(x, s, b),
        "layer_norm": lambda x, s, b: jm.layer_norm(x, s, b),
        "rms_norm": lambda x, s, b: jm.rms_norm(x, s),
        "softmax": lambda x, s, b: jm.softmax(x),  # (x * s + b: XLA's reductions of s and b vary with the threads)
    }
    shapes = [(1, 1), (5, 7), (1, 70001), (1, 1 << 20), (3, 50257), (16, 4096), (17, 1000), (64, 1000),
              (300, 1024), (1, 4, 1000), (6, 3, 2000), (6, 40, 512)]  # rank 3: per-example parameters (vmap)
    out = {}
    for dt in (jnp.float32, jnp.bfloat16, jnp.float16):
        for shape in shapes:
            k = jax.random.split(jax.random.key(sum(shape)), 4)
            x = (2 * jax.random.normal(k[0], shape)).astype(dt)
            dy = jax.random.normal(k[1], shape).astype(dt)
            pshape = shape[:1] + shape[-1:] if len(shape) == 3 else shape[-1:]
            s = 1 + 0.1 * jax.random.normal(k[2], pshape)
            b = 0.1 * jax.random.normal(k[3], pshape)
            for name, f in ops.items():
                def step(x, s, b, dy, f=f):
                    y, pull = jax.vjp(f, x, s, b)
                    return (y, *pull(dy))
                if len(shape) == 3:
                    step = jax.vmap(step)
                res = jax.jit(step)(x, s, b, dy)
                for i, r in enumerate(res):
                    out[f"{name}/{jnp.dtype(dt).name}/{shape}/{i}"] = np.asarray(r.astype(jnp.float32)).view(np.uint32)
    return out


if __name__ == "__main__":
    if sys.argv[1] == "--compare":
        a, b = np.load(sys.argv[2]), np.load(sys.argv[3])
        diff = [k for k in a.files if not np.array_equal(a[k], b[k])]
        print(f"{len(a.files)} outputs, {len(diff)} differ" + "".join(f"\n  {k}" for k in diff))
    else:
        np.savez(sys.argv[1], **outputs())
