"""Forward mode's custom calls (jax.jvp: y and its tangent in one kernel) on small odd shapes, every dtype, with
parameter arrays, Python numbers and per-example (vmapped) parameters: the workload compute-sanitizer runs over on the
GPU; each result is checked against jax.jvp of the pure-jnp reference on the CPU, so garbage fails the run too.

    XLA_PYTHON_CLIENT_PREALLOCATE=false compute-sanitizer --tool memcheck python benchmarks/sanitize_jvp.py
"""

import sys

import jax
import jax.numpy as jnp
import numpy as np

import jax_memops as jm
from jax_memops import reference

SHAPES = [(3, 1), (2, 3), (5, 33), (4, 1000), (2, 4097), (1, 8), (7, 64)]
DTYPES = [jnp.float32, jnp.bfloat16, jnp.float16]
TOL = {jnp.float32: 1e-4, jnp.bfloat16: 5e-2, jnp.float16: 1e-2}
OPS = {
    "gelu_arrays": (jm.scale_bias_gelu, reference.scale_bias_gelu),
    "gelu_numbers": (lambda x, s, b: jm.scale_bias_gelu(x, 1.5, -0.25),
                     lambda x, s, b: reference.scale_bias_gelu(x, 1.5, -0.25)),
    "layer_norm": (jm.layer_norm, reference.layer_norm),
    "rms_norm": (lambda x, s, b: jm.rms_norm(x, s), lambda x, s, b: reference.rms_norm(x, s)),
}


def main():
    cpu = jax.devices("cpu")[0]
    key = jax.random.key(0)
    bad = 0
    for name, (ours, ref) in OPS.items():
        for batched in (False, True):
            fn = jax.jit(lambda p, t, f=ours: jax.jvp(jax.vmap(f) if batched else f, p, t))
            want_fn = jax.jit(lambda p, t, f=ref: jax.jvp(jax.vmap(f) if batched else f, p, t), device=cpu)
            for i, shape in enumerate(SHAPES):
                dtype = DTYPES[i % len(DTYPES)]
                lead = (2,) if batched else ()
                ks = jax.random.split(jax.random.fold_in(key, i), 6)
                x = (2 * jax.random.normal(ks[0], lead + shape)).astype(dtype)
                s = 1 + 0.5 * jax.random.normal(ks[1], lead + shape[-1:])
                b = 0.5 * jax.random.normal(ks[2], lead + shape[-1:])
                t = jax.random.normal(ks[3], lead + shape).astype(dtype)
                ts, tb = jax.random.normal(ks[4], s.shape), jax.random.normal(ks[5], b.shape)
                y, ty = fn((x, s, b), (t, ts, tb))
                wy, wty = want_fn(*jax.device_put(((x, s, b), (t, ts, tb)), cpu))
                for what, got, want in (("y", y, wy), ("tangent", ty, wty)):
                    g, w = np.asarray(got, np.float64), np.asarray(want, np.float64)
                    err = np.linalg.norm(g - w) / max(np.linalg.norm(w), 1e-30)
                    ok = got.dtype == want.dtype and err <= TOL[dtype]
                    bad += not ok
                    print(f"{'ok ' if ok else 'BAD'} {name} {'vmap ' if batched else ''}{shape} "
                          f"{jnp.dtype(dtype).name} {what}: rel err {err:.1e}")
    print("failures:", bad)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
