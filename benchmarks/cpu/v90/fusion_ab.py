"""v90 (RESULTS.md "The CPU handlers, v90"): the fusion experiment (gelu(1.5 x + 0.25), 1-D x, scalars) at 2^16,
2^18 and 2^21 elements, f32 / bf16 / f16. Run with PYTHONPATH=DIR of a `pip install --target DIR` build."""
import jax

from jax_memops import bench

for n in (1 << 16, 1 << 18, 1 << 21):
    for dt in ("float32", "bfloat16", "float16"):
        r = bench.fusion_case(n, dt, jax.random.key(0), None, 7)
        print(f"{n:8d} {dt:9s} fused {r['ours_fused_ms']:.4f} 3k {r['ours_3_kernels_ms']:.4f} "
              f"xla {r['xla_fused_ms']:.4f} 3k/fused {r['fused_vs_3_kernels']:.2f} "
              f"xla/fused {r['fused_vs_xla_fused']:.2f}", flush=True)
