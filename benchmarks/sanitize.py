"""Every kernel, forward and backward, on small odd shapes, every dtype: the workload that
compute-sanitizer (memcheck, racecheck) runs over on the GPU. Also checks the results, so a run that
computes garbage fails even where the sanitizer sees nothing.

    XLA_PYTHON_CLIENT_PREALLOCATE=false compute-sanitizer --tool memcheck python benchmarks/sanitize.py
(no preallocation: memcheck only sees out-of-bounds accesses that leave a real allocation.)

The A/B kernel versions (read from the environment once per process) need their own process:
    JAX_MEMOPS_SOFTMAX_FWD=v5-reg JAX_MEMOPS_NORM_FWD=v4 python benchmarks/sanitize.py --ab
runs only the shapes of the kernels that the defaults do not run for some dtype (the bulk-copy cluster
through registers in f32; norm_fwd_half_kernel in 16-bit types) under those versions
(benchmarks/gpu_check.sh's sanitize stage runs both workloads under both tools). `--only NAME...` (last on
the command line) keeps those ops of either workload (e.g. `--only softmax`). `--fwd` runs the forward alone
(the checks' labels say fwd): racecheck's run of the whole workload stops with an "Internal Sanitizer
Error" at the first backward launched on a thread-block cluster (softmax f32 2 x 12288), whichever kernels
it instruments, so the forward kernels of the shapes after it are raced only this way. `--from N` skips the
checks numbered below N (the numbers the run prints), to go on past a check where a tool crashed.
"""

import functools
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np

import jax_memops as jm
from jax_memops import reference, unfused

# (5, 33), (300, 64): several teams per warp in the one-pass backward kernels (norms, gelu partials),
# (300, 64) also several rows per partial; (4, 1024): teams of 64-256 threads (shared-memory team sums);
# (3, 4095): unvectorized rows in the fused norm backward; (3, 4097): its fallback, gelu's 2 column
# tiles; (2, 12288): one 512-thread team per row (norms), 2 tiles (gelu f32); (1, 1), (2, 3, 31): tiny.
# Norm forward classes (norm_rows.cuh): (1, 1), (5, 33), (300, 64), (3, 1001) team rows, misaligned
# for 1001; (4, 1024) team; (3, 1028) f32 block rows of 64 (16-bit: team); (2, 2056) block rows
# (16-bit: 64 threads); (3, 4097) block, misaligned; (2, 12288) block rows of 384 / 192; (1, 24580) the
# f32 v1 fallback (16-bit: 384-thread block rows, misaligned). (32003, 33): enough rows for P ~ 2 per
# SM, so the norms' fused backward runs 256-thread blocks. v3 (16-bit register partials, gelu's row
# pairs): (301, 2048) bf16, odd rows per team; (2, 12288) f16, a 512-thread team with K = 3 in
# registers; (4, 1024) bf16, (300, 64) f16 (with vmap) and (3, 1028) f16 (scalar packs) above. v17: the
# norms' long-row fused backward, (3, 16384) f32 (32 elements per thread) and (2, 24576) bf16 (48). v23's lean
# forward rows (norm_fwd_lean.cuh: bf16 LayerNorm rows of whole packs): block rows (2, 24576) every slot used,
# (3, 2056) not; team rows of 6 packs (300, 64) and of 8 (4, 1024), (301, 2048) (odd rows per team); beside them
# f16 (2, 4096) and f32 (5, 1024) block rows. v29's lean block rows at lean_block_packs (f32 C = 1028..8192 at 2..4
# packs, bf16 LayerNorm at 4): f32 (301, 2048) and (3, 1028) at 3 (slots left empty), (3, 2056) at 4 / 2 (RMSNorm),
# (2, 4096), (2, 8192); bf16 LayerNorm (3, 2056), (2, 4096). Since v44 the lean rows with cached I/O, and f32 block rows
# holding their parameters (lean_block_plan): RMSNorm's all, LayerNorm's (3, 1028) (slots left empty), (3, 2056) and
# (301, 2048) at 4 packs. v31's 16-bit RMSNorm backward on 256-thread teams of
# K = 4 packs (two teams of a 512-thread block at their own barriers): (2, 8192) every slot used (one row per
# block), (300, 6152) not (2-3 rows per block: both teams at work); (263, 10000) LayerNorm / RMSNorm at K = 3.
# v33's backward rows through two stages of shared memory, enough rows per team that each stage is filled 3-10 times
# (its mbarrier's phase flips): 16-bit (1201, 4096) on 256-thread teams, (411, 8192) and (530, 12288) on 512-thread
# teams of K = 2 / 3, f32 LayerNorm (700, 8192) on 512-thread teams of K = 4. v34's f32 rows of K = 6 on 512-thread
# teams, read from two stages: (397, 10000) f32, slots left empty, each stage filled once or twice per block (three or
# four rows a block), the slabs over the stages at the end; (2, 12288) f32 above, full rows. v35's 16-bit LayerNorm rows
# of K = 3 read from their stages: (301, 2560) on 128-thread teams, (131, 5000) on 256-thread teams (two a block), slots
# left empty; (263, 10000) and (530, 12288) above on 512-thread teams. Since v36 (the default; JAX_MEMOPS_NORM_BWD=v35
# keeps v35's teams), 16-bit teams of a multiple of 32 threads that is not a power of two (cpp/norm_bwd.cu odd_team;
# SHAPES[i] runs in dtype i % 3, so (3, 4608) is f32, the fused kernel, and the two after it 16-bit): (67, 2304) 96
# threads of K = 3, five a block; (131, 4608) 192 of K = 3, two a block; (131, 5000) 224 of K = 3, slots left empty, two
# a block. v45's f32 lean block rows of 129..256 packs, parameters held: (3, 768) at 3 packs, every slot used, (2, 1000)
# at 4, slots left empty; (5, 1024) above; f32 (3, 1001) on v4's rows with cached I/O. v48's bf16 pair rows (two rows
# per block, lean_pair_plan): (263, 10000) at 4 packs (odd rows), (700, 8192) at 3, (131, 5000) at 3 / 4 (RMSNorm).
SHAPES = [(1, 1), (5, 33), (300, 64), (3, 1001), (4, 1024), (3, 1028), (2, 2056), (3, 4095), (3, 4097),
          (2, 12288), (1, 24580), (32003, 33), (2, 3, 31), (301, 2048), (2, 12288), (3, 16384), (2, 24576),
          (2, 4096), (5, 1024), (3, 2056), (2, 8192), (300, 6152), (263, 10000), (1201, 4096), (700, 8192),
          (530, 12288), (411, 8192), (397, 10000), (131, 5000), (301, 2560), (3, 4608), (67, 2304), (131, 4608),
          (3, 768), (7, 1000), (3, 600), (2, 1000)]
# One small shape per size class of softmax "auto" (cpp/softmax_launch.cuh): sub-warp rows, a warp, block rows
# (misaligned rows), clusters (7 CTAs; 8 x 512 or 16 x 512 / 8 x 1024; 16-bit: 8 x 1024 or 16 x 512),
# the two-pass stream class; the forward of 16-bit 3 x 50257 runs v14's two-pass kernel (L2 as the row
# buffer).
SOFTMAX_CLASS_SHAPES = [(67, 100), (9, 1000), (3, 4097), (3, 50257), (2, 131072), (2, 262144), (2, 262147)]
# The forward's rows on 2 packs per thread (v25: 16-bit C <= 64 on 4 threads, blocks of 128; v26, v27: rows that fill
# the 2 packs, 16-bit C = 128, 256 and f32 C = 32, 64, 128 at >= 6 blocks of 256, 256 unbounded), several row groups,
# a partial last block; before the class shapes, whose clusters stop racecheck's run.
SOFTMAX_SHORT_SHAPES = [((300, 128), jnp.bfloat16), ((301, 128), jnp.float32), ((70, 64), jnp.float32),
                        ((7, 32), jnp.float32), ((70, 48), jnp.float16), ((150, 256), jnp.float16),
                        ((150, 256), jnp.float32)]
# Forward v5 (cpp/softmax_fwd_regs.cuh, softmax_fwd_tma.cuh), each in a fixed dtype: the sub-warp class
# with more row groups than the H200's resident CTAs (misaligned rows); the bulk-copy cluster with one
# buffer (f32 8193 under v5: k = 1, misaligned; 68 x 131072: k = 8, ~45 resident clusters, so the buffer is
# refilled and waited on with parity 1, and the slots and block partials are reused; 262147 misaligned;
# bf16 600001: past the register plan's 16 x 4096 packs), through registers (bf16 131073 misaligned,
# f16 300 x 16385: k = 1, 16 packs per thread); the stream class beyond one buffer (f32 1000003).
# v9's 8-pack block rows take f32 4097 ... 32768 and 16-bit 2049 ... 32768: 8193 (512 threads), f16 300 x
# 16385 (512 threads, more rows than resident CTAs) and f32 30001 (1024 threads, misaligned) here,
# 4097 in SOFTMAX_CLASS_SHAPES.
SOFTMAX_V5_SHAPES = [((40000, 33), jnp.float32), ((3, 8193), jnp.float32), ((60, 131073), jnp.bfloat16),
                     ((68, 131072), jnp.float32), ((9, 262147), jnp.float32), ((3, 600001), jnp.bfloat16),
                     ((300, 16385), jnp.float16), ((2, 1000003), jnp.float32), ((5, 30001), jnp.float32)]
# --ab (under JAX_MEMOPS_SOFTMAX_FWD=v5-reg JAX_MEMOPS_NORM_FWD=v4). Softmax through registers in f32:
# 16 packs per thread (8193: k = 1), 8 packs (68 x 131072: k = 16, ~28 resident clusters, refilled). Norms,
# 4 packs per thread (the f32 default; here every dtype): team rows (33; 64 with many rows; 1001
# misaligned), f32 block rows of 64 (1028) with more rows than resident blocks (4000 x 768), block rows
# (2056; 4097 misaligned; 12288: 768 f32 / 384 16-bit threads), and v3's kernel beyond (f32 12292).
# The backward's clusters of 5 packs per thread (cpp/softmax_bwd.cu launch_bwd_v38) at the barrier's merge: f32 16385 on 2
# CTAs (v38, the default, and v37), bf16 50257 on 3 (v37 only; the default: 4 of 4 packs by messages). By messages:
# SOFTMAX_CLASS_SHAPES' f32 50257 on 5 (v38, v37), f32 262147 on 13 of 1024 threads (v38), bf16 131072 and f16 262144
# on 7 and 13 (v37); SOFTMAX_V5_SHAPES' bf16 131073 on 7 (both), bf16 600001 on 15 of 1024 and f32 262147 on 13 of
# 1024 (v38), f32 131072 on 13 (v37). v38's 16 CTAs of 1024 threads, 4 packs: f32 262144, bf16 524288 (beside 5 packs
# on 16 of 512: f16 327680).
SOFTMAX_WIDE_SHAPES = [((3, 16385), jnp.float32), ((5, 50257), jnp.bfloat16), ((2, 262144), jnp.float32),
                       ((2, 524288), jnp.bfloat16), ((2, 327680), jnp.float16)]
SOFTMAX_AB_SHAPES = [((3, 8193), jnp.float32), ((68, 131072), jnp.float32), ((5, 50257), jnp.float16)]
# v49's prefetch of each bulk-copy CTA's next share into L2 (softmax_fwd_tma.cuh `ahead`) runs where a cluster has a
# next row: more rows than resident clusters. Through registers (bf16 100003: k = 4, misaligned) and from one buffer
# (f32 32771, misaligned); SOFTMAX_V5_SHAPES' f32 68 x 131072 too.
SOFTMAX_AHEAD_SHAPES = [((300, 100003), jnp.bfloat16), ((600, 32771), jnp.float32)]
NORM_V4_SHAPES = [((5, 33), jnp.float32), ((300, 64), jnp.bfloat16), ((3, 1001), jnp.float16),
                  ((3, 1028), jnp.float32), ((4000, 768), jnp.float32), ((2, 2056), jnp.bfloat16),
                  ((3, 4097), jnp.float32), ((2, 12288), jnp.float32), ((2, 12288), jnp.bfloat16),
                  ((1, 12292), jnp.float32)]
TOL = {jnp.float32: 2e-5, jnp.bfloat16: 2e-2, jnp.float16: 4e-3}


def _other(x):
    """The output dtype of the `dtype` checks: float32 for a 16-bit x, bfloat16 for a float32 one."""
    return jnp.bfloat16 if x.dtype == jnp.float32 else jnp.float32


def _other16(x):
    """The output dtype of the `dtype16` checks, the pairs `dtype` leaves: float16 for a float32 or bfloat16 x,
    bfloat16 for a float16 one."""
    return jnp.bfloat16 if x.dtype == jnp.float16 else jnp.float16


def check(name, got, want, tol):
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        g, w = np.asarray(g, np.float64), np.asarray(w, np.float64)
        err = np.max(np.abs(g - w)) / max(np.max(np.abs(w)), 1.0) if w.size else 0.0
        if not err <= tol:
            sys.exit(f"FAIL {name}: relative error {err:.3g} > {tol:g}")


def main():
    """Each GPU kernel path once per shape, in one dtype per shape (rotating f32, bf16, f16), forward and
    backward in one jitted function; references run on the CPU. Under compute-sanitizer every XLA
    compilation loads an instrumented module, so the number of compilations sets the run time: on the
    H200 a workload of one compile per op x shape x dtype x direction did not finish in 170 s."""
    cpu = jax.devices("cpu")[0]
    key = jax.random.key(0)
    ops = {
        "softmax": (lambda x, s, b: jm.softmax(x), lambda x, s, b: reference.softmax(x)),
        "layer_norm": (jm.layer_norm, reference.layer_norm),
        "layer_norm_noparams": (lambda x, s, b: jm.layer_norm(x), lambda x, s, b: reference.layer_norm(x)),
        "layer_norm_scale": (lambda x, s, b: jm.layer_norm(x, s), lambda x, s, b: reference.layer_norm(x, s)),
        "rms_norm": (lambda x, s, b: jm.rms_norm(x, s), lambda x, s, b: reference.rms_norm(x, s)),
        # y in another dtype than x (`dtype`: the lean rows or norm_fwd_mixed, norm_bwd_general with dy of y's dtype)
        "layer_norm_dtype": (lambda x, s, b: jm.layer_norm(x, s, b, dtype=_other(x)),
                             lambda x, s, b: reference.layer_norm(x.astype(jnp.float32), s, b).astype(_other(x))),
        "rms_norm_dtype": (lambda x, s, b: jm.rms_norm(x, s, dtype=_other(x)),
                           lambda x, s, b: reference.rms_norm(x.astype(jnp.float32), s).astype(_other(x))),
        "layer_norm_dtype16": (lambda x, s, b: jm.layer_norm(x, s, b, dtype=_other16(x)),
                               lambda x, s, b: reference.layer_norm(x.astype(jnp.float32), s, b).astype(_other16(x))),
        "rms_norm_dtype16": (lambda x, s, b: jm.rms_norm(x, s, dtype=_other16(x)),
                             lambda x, s, b: reference.rms_norm(x.astype(jnp.float32), s).astype(_other16(x))),
        "gelu_arrays": (jm.scale_bias_gelu, reference.scale_bias_gelu),
        "gelu_3_kernels": (lambda x, s, b: unfused.three_kernels(x, 1.5, 0.25),
                           lambda x, s, b: reference.scale_bias_gelu(x, 1.5, 0.25)),
        "gelu_scalars": (lambda x, s, b: jm.scale_bias_gelu(x, 1.5, 0.25),
                         lambda x, s, b: reference.scale_bias_gelu(x, 1.5, 0.25)),
    }

    fwd_only = "--fwd" in sys.argv[1:]
    direction = "fwd" if fwd_only else "fwd+bwd"

    def fwd_bwd(f):
        if fwd_only:
            return jax.jit(f)

        def run(x, s, b):
            y, pullback = jax.vjp(f, x, s, b)
            return y, pullback((y.astype(jnp.float32) * 0.5 + 0.25).astype(y.dtype))  # finite also where x = -inf
        return jax.jit(run)

    def vmapped(f):  # batched parameters: the row-group path of every kernel
        if fwd_only:
            return jax.jit(jax.vmap(f))
        return jax.jit(jax.vmap(lambda x, s, b: jax.grad(
            lambda x, s, b: jnp.sum(f(x, s, b).astype(jnp.float32) * x.astype(jnp.float32)), (0, 1, 2))(x, s, b)))

    ab = "--ab" in sys.argv[1:]
    # --only NAME...: those entries of `ops` (and, with softmax, its ladder and class shapes); shorter runs
    # where a tool crashes partway through the whole workload. The `dtype16` entries run only when named (the f16
    # pairs' kernels are the `dtype` ones' templates; the whole workload already fills the sanitizers' time limits).
    only = (sys.argv[sys.argv.index("--only") + 1:] if "--only" in sys.argv
            else [name for name in ops if not name.endswith("_dtype16")])
    unknown = sorted(set(only) - set(ops))
    if unknown or not only:
        sys.exit(f"--only takes names among {sorted(ops)}; got {only}")
    ops = {k: v for k, v in ops.items() if k in only}
    if ab:
        want = {"JAX_MEMOPS_SOFTMAX_FWD": "v5-reg", "JAX_MEMOPS_NORM_FWD": "v4"}
        if any(os.environ.get(k) != v for k, v in want.items()):
            sys.exit("--ab needs " + " ".join(f"{k}={v}" for k, v in want.items()))
        ops = {k: ops[k] for k in ("softmax", "layer_norm", "rms_norm") if k in ops}
    compiled = {name: (fwd_bwd(ours), fwd_bwd(ref), vmapped(ours), vmapped(ref))
                for name, (ours, ref) in ops.items()}
    dtypes = list(TOL)
    n = 0

    first = int(sys.argv[sys.argv.index("--from") + 1]) if "--from" in sys.argv else 0

    def run_check(label, fn, ref_fn, args, tol):
        nonlocal n
        if n < first:
            n += 1
            return
        print(f"[{n}] {label}", flush=True)  # the last line names the culprit if a tool crashes
        check(label, fn(*args), ref_fn(*jax.device_put(args, cpu)), tol)
        n += 1

    if ab:
        for names, shapes in ((("softmax",), SOFTMAX_AB_SHAPES), (("layer_norm", "rms_norm"), NORM_V4_SHAPES)):
            names = tuple(name for name in names if name in ops)
            for shape, dtype in shapes if names else ():
                key, kx, ks, kb = jax.random.split(key, 4)
                x = 2 * jax.random.normal(kx, shape)
                if names == ("softmax",):
                    x = x.at[..., 1::3].set(-jnp.inf)
                x = x.astype(dtype)
                s = 1 + 0.1 * jax.random.normal(ks, shape[-1:])
                b = 0.1 * jax.random.normal(kb, shape[-1:])
                for name in names:
                    ours, ref = compiled[name][:2]
                    run_check(f"{name} ab {jnp.dtype(dtype).name} {shape} {direction}", ours, ref, (x, s, b),
                              10 * TOL[dtype])
        print(f"sanitize workload (ab): {n - min(first, n)} checks passed on {jax.devices()[0].device_kind}")
        return

    for i, shape in enumerate(SHAPES):
        dtype = dtypes[i % len(dtypes)]
        key, kx, ks, kb = jax.random.split(key, 4)
        x = (2 * jax.random.normal(kx, shape)).astype(dtype)
        s = 1 + 0.1 * jax.random.normal(ks, shape[-1:])
        b = 0.1 * jax.random.normal(kb, shape[-1:])
        for name, (ours, ref, ours_v, ref_v) in compiled.items():
            label = f"{name} {jnp.dtype(dtype).name} {shape}"
            # the `dtype` checks: the less precise of x's dtype and y's (whose cotangent rounds like y)
            y_dtype = _other(x) if name.endswith("_dtype") else _other16(x) if name.endswith("_dtype16") else dtype
            tol = 10 * max(TOL[dtype], TOL[y_dtype])
            run_check(label + " " + direction, ours, ref, (x, s, b), tol)
            if i < 3:
                xs, ss, bs = jnp.stack([x, x[::-1]]), jnp.stack([s, 2 * s]), jnp.stack([b, b])
                run_check(label + " vmap", ours_v, ref_v, (xs, ss, bs), tol)
    if "softmax" not in ops:
        print(f"sanitize workload: {n - min(first, n)} checks passed on {jax.devices()[0].device_kind}")
        return
    # The seed's ladder v1..v7 (forward; the backward is auto's), plain and with -inf masks.
    softmax_ref = jax.jit(reference.softmax)
    for shape in ((5, 33), (3, 4097)):
        key, kx = jax.random.split(key)
        x = 2 * jax.random.normal(kx, shape)
        for alg in jm.SOFTMAX_ALGORITHMS[1:]:
            fn = jax.jit(functools.partial(jm.softmax, algorithm=alg))
            run_check(f"softmax[{alg}] masked float32 {shape} fwd", fn, softmax_ref,
                      (x.at[..., 1::3].set(-jnp.inf),), TOL[jnp.float32])
    # softmax "auto" in every size class, forward and backward, masked (no row all -inf).
    softmax_fb = fwd_bwd(lambda x, s, b: jm.softmax(x))
    softmax_fb_ref = fwd_bwd(lambda x, s, b: reference.softmax(x))
    cases = [("short ", shape, dtype) for shape, dtype in SOFTMAX_SHORT_SHAPES]
    cases += [("", shape, dtypes[i % len(dtypes)]) for i, shape in enumerate(SOFTMAX_CLASS_SHAPES)]
    cases += [("v5 ", shape, dtype) for shape, dtype in SOFTMAX_V5_SHAPES]
    cases += [("wide ", shape, dtype) for shape, dtype in SOFTMAX_WIDE_SHAPES]
    cases += [("ahead ", shape, dtype) for shape, dtype in SOFTMAX_AHEAD_SHAPES]
    empty = jnp.zeros((0,), jnp.float32)
    for tag, shape, dtype in cases:
        key, kx = jax.random.split(key)
        x = (2 * jax.random.normal(kx, shape)).at[..., 1::3].set(-jnp.inf).astype(dtype)
        run_check(f"softmax[auto] {tag}masked {jnp.dtype(dtype).name} {shape} {direction}", softmax_fb,
                  softmax_fb_ref, (x, empty, empty), 10 * TOL[dtype])
    print(f"sanitize workload: {n - min(first, n)} checks passed on {jax.devices()[0].device_kind}")


if __name__ == "__main__":
    main()
