# racecheck probe: the softmax forward alone (no backward), one shape at a time, printed before each run.
import sys, numpy as np, jax, jax.numpy as jnp, jax_memops as jm
for spec in sys.argv[1:]:
    dt, shape = spec.split(":")
    shape = tuple(int(v) for v in shape.split("x"))
    x = jnp.asarray(np.random.default_rng(0).normal(size=shape).astype(np.float32)).astype(dt)
    print(spec, flush=True)
    y = jax.jit(jm.softmax)(x)
    ref = jax.nn.softmax(x.astype(jnp.float32), axis=-1)
    print(spec, "max err", float(jnp.max(jnp.abs(y.astype(jnp.float32) - ref))), flush=True)
