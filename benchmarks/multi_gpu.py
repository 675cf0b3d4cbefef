"""Row-sharded jax_memops ops on every visible GPU vs one GPU, at the same global shape (issue 9).

For softmax forward and layer_norm forward + backward (jit of the VJP): the sharded result must equal the
one-GPU result, the compiled HLO must hold no all-gather / all-to-all (rows stay local; layer_norm's
dscale/dbias need one all-reduce of C floats), and the time on n GPUs should approach 1/n of one GPU's.
XLA's own formulation runs beside ours on the same mesh for context.

    python3 benchmarks/multi_gpu.py [--out DIR] [--cols 4096] [--elements 2**27]

NVLink multicast stays off (the device machines require it): NCCL_NVLS_ENABLE=0 and friends are set
below before JAX starts, unless the caller already set them.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys

for var, value in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"),
                   ("NVSHMEM_DISABLE_NVLS", "1")):
    os.environ.setdefault(var, value)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

import jax_memops as jm  # noqa: E402
from jax_memops import reference  # noqa: E402
from jax_memops.bench import max_rel_diff, time_interleaved  # noqa: E402

COLLECTIVE = re.compile(r"\b(all-gather|all-to-all|all-reduce|collective-permute|reduce-scatter)(-start)?\(")


def ops():
    """name -> (fn(x, scale, bias, dy), bytes moved per element of x in units of its itemsize)."""
    def softmax_fwd(f):
        return (lambda x, s, b, dy: f(x)), 2

    def norm_fwd_bwd(f):
        def run(x, s, b, dy):
            y, pullback = jax.vjp(f, x, s, b)
            return y, pullback(dy)
        return run, 5

    return {
        "softmax fwd": {"jm": softmax_fwd(jm.softmax), "xla": softmax_fwd(reference.softmax)},
        "layer_norm fwd+bwd": {"jm": norm_fwd_bwd(jm.layer_norm), "xla": norm_fwd_bwd(reference.layer_norm)},
    }


def collectives(compiled_text: str) -> dict[str, int]:
    found: dict[str, int] = {}
    for m in COLLECTIVE.finditer(compiled_text):
        found[m.group(1)] = found.get(m.group(1), 0) + 1
    return found


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cols", type=int, default=4096)
    p.add_argument("--elements", type=int, default=1 << 27)
    p.add_argument("--platform", default="gpu", help="gpu; cpu for a smoke run with "
                   "XLA_FLAGS=--xla_force_host_platform_device_count=2")
    p.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"])
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--out", default="multi-gpu-out")
    args = p.parse_args(argv)

    try:
        gpus = jax.devices(args.platform)
    except RuntimeError:
        gpus = []
    if len(gpus) < 2:
        print(f"needs 2 or more {args.platform} devices; JAX sees {len(gpus)}", file=sys.stderr)
        return 2
    n = len(gpus)
    mesh = jax.make_mesh((n,), ("g",), devices=gpus)
    rows_spec, one = NamedSharding(mesh, P("g")), jax.sharding.SingleDeviceSharding(gpus[0])
    replicated = NamedSharding(mesh, P())
    rows, cols = args.elements // args.cols, args.cols
    os.makedirs(args.out, exist_ok=True)
    print(f"{n} x {gpus[0].device_kind}, jax {jax.__version__}; global shape ({rows}, {cols})", flush=True)

    results = []
    key = jax.random.key(0)
    for dtype_name in args.dtypes:
        dtype = jnp.dtype(dtype_name)
        k = jax.random.split(jax.random.fold_in(key, len(results)), 4)
        x = (2.0 * jax.random.normal(k[0], (rows, cols), jnp.float32)).astype(dtype)
        dy = jax.random.normal(k[1], (rows, cols), jnp.float32).astype(dtype)
        s = 1.0 + 0.1 * jax.random.normal(k[2], (cols,))
        b = 0.1 * jax.random.normal(k[3], (cols,))
        on_one = [jax.device_put(a, one) for a in (x, s, b, dy)]
        on_all = [jax.device_put(x, rows_spec), jax.device_put(s, replicated), jax.device_put(b, replicated),
                  jax.device_put(dy, rows_spec)]
        for op, impls in ops().items():
            for impl, (fn, passes) in impls.items():
                single = jax.jit(fn)
                sharded = jax.jit(fn)
                text = sharded.lower(*on_all).compile().as_text()
                found = collectives(text)
                diff = max_rel_diff(jax.device_put(sharded(*on_all), one), single(*on_one))
                t1, tn = time_interleaved([lambda: single(*on_one), lambda: sharded(*on_all)],
                                          args.iters, args.reps)
                gbytes = rows * cols * dtype.itemsize * passes / 1e9
                r = {"op": op, "impl": impl, "dtype": dtype_name, "shape": [rows, cols], "gpus": n,
                     "one_gpu_ms": t1, "n_gpu_ms": tn, "speedup": t1 / tn, "one_gpu_gbps": gbytes / t1 * 1e3,
                     "n_gpu_gbps": gbytes / tn * 1e3, "max_rel_diff_vs_one_gpu": diff, "collectives": found}
                results.append(r)
                print(f"{op:20s} {impl:3s} {dtype_name:8s} 1 GPU {t1:7.3f} ms  {n} GPUs {tn:7.3f} ms  "
                      f"x{t1 / tn:4.2f}  diff {diff:.1e}  collectives {found}", flush=True)
                tol = 1e-5 if dtype == jnp.float32 else 1e-2
                if impl == "jm" and ("all-gather" in found or "all-to-all" in found or not diff <= tol):
                    print(f"FAIL: {op} {dtype_name}: row sharding must not gather and must match one GPU "
                          f"(diff {diff:.2e})", file=sys.stderr)
                    return 1
    with open(os.path.join(args.out, "multi_gpu.json"), "w") as f:
        json.dump({"devices": [str(d) for d in gpus], "jax": jax.__version__, "results": results}, f, indent=1)
    lines = ["| op | impl | dtype | 1 GPU ms | %d GPUs ms | speedup | %d-GPU TB/s | collectives |" % (n, n),
             "|---|---|---|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r['op']} | {r['impl']} | {r['dtype']} | {r['one_gpu_ms']:.3f} | {r['n_gpu_ms']:.3f} | "
                     f"{r['speedup']:.2f}x | {r['n_gpu_gbps'] / 1e3:.2f} | {r['collectives'] or 'none'} |")
    with open(os.path.join(args.out, "multi_gpu.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
