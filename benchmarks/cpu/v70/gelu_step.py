import sys, time, numpy as np, jax, jax.numpy as jnp, jax_memops as jm
rows, cols, dt = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
k = jax.random.split(jax.random.key(0), 3)
x = jax.random.normal(k[0], (rows, cols), jnp.float32).astype(dt); g = (0.5 * x).astype(dt)
s = 1 + 0.1 * jax.random.normal(k[1], (cols,)); b = 0.1 * jax.random.normal(k[2], (cols,))
step = jax.jit(lambda x, s, b, g: jax.vjp(jm.scale_bias_gelu, x, s, b)[1](g))
def med(calls=40):
    jax.block_until_ready(step(x, s, b, g)); t = []
    for _ in range(calls):
        t0 = time.perf_counter(); jax.block_until_ready(step(x, s, b, g)); t.append(time.perf_counter() - t0)
    return np.median(t) * 1e3
print(" ".join(f"{med():.2f}" for _ in range(5)))
