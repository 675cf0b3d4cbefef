"""Training steps (jit of the VJP) of the ops with parameter gradients, ours only: 4096 x 1024, one core."""
import sys, time, numpy as np, jax, jax.numpy as jnp, jax_memops as jm
f32 = jnp.float32
rows, cols = (int(v) for v in (sys.argv[1:] or ["4096", "1024"])[:2])
k = jax.random.split(jax.random.key(0), 3)
x32 = jax.random.normal(k[0], (rows, cols), f32)
s = 1 + 0.1 * jax.random.normal(k[1], (cols,), f32)
b = 0.1 * jax.random.normal(k[2], (cols,), f32)
ops = {"layer_norm": lambda x, s, b: jm.layer_norm(x, s, b, epsilon=1e-5),
       "rms_norm": lambda x, s, b: jm.rms_norm(x, s, epsilon=1e-5), "gelu": jm.scale_bias_gelu}
def med(f, *a, calls=30):
    jax.block_until_ready(f(*a)); t = []
    for _ in range(calls):
        t0 = time.perf_counter(); jax.block_until_ready(f(*a)); t.append(time.perf_counter() - t0)
    return np.median(t) * 1e3
print("isa", jm.build_info()["cpu_isa"])
for dtype in ("float32", "bfloat16", "float16"):
    x, g = x32.astype(dtype), (0.5 * x32).astype(dtype)
    for name, f in ops.items():
        step = jax.jit(lambda x, s, b, g, f=f: jax.vjp(f, x, s, b)[1](g))
        t = min(med(step, x, s, b, g) for _ in range(3))
        print(f"{name} {dtype} step {t:.3f}", flush=True)
