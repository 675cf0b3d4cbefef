import sys, numpy as np, jax, jax.numpy as jnp, jax_memops as jm
sys.path.insert(0, "/work/main/tests"); import memops_testing as mt
rng = np.random.default_rng(5)
for rows, cols in ((4096, 1024), (256, 50257)):
    x = mt.randn(rng, (rows, cols), np.float32, scale=2.0, loc=0.3); g = mt.randn(rng, (rows, cols), np.float32, scale=1.0)
    s = mt.randn(rng, (cols,), np.float32, loc=1.0, scale=0.5); b = mt.randn(rng, (cols,), np.float32)
    for op, f, ref in (("gelu", jm.scale_bias_gelu, lambda: mt.ref_scale_bias_gelu_vjp(x, s, b, g)),
                       ("layer_norm", jm.layer_norm, lambda: mt.ref_layer_norm_vjp(x, s, b, 1e-5, g))):
        got = jax.jit(lambda x, s, b, g: jax.vjp(f, x, s, b)[1](g))(x, s, b, g)
        r = ref()
        errs = [np.max(np.abs(np.asarray(got[k], np.float64) - r[k])) / np.max(np.abs(r[k])) for k in (1, 2)]
        print(f"{rows}x{cols} {op}: dscale {errs[0]:.2e} dbias {errs[1]:.2e} (max abs err / max abs)")
