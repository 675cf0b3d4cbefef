"""LayerNorm's and RMSNorm's CUDA kernels under their A/B switches (cpp/norm_fwd.cu JAX_MEMOPS_NORM_FWD, cpp/norm_bwd.cu
JAX_MEMOPS_NORM_BWD, cpp/norm_jvp.cu JAX_MEMOPS_NORM_JVP, cpp/cuda_common.cuh JAX_MEMOPS_GRID: read once per process,
so each version runs its script in a fresh interpreter): every size class of every version, forward, backward and
forward mode, against the float64 reference. GPU only."""

from __future__ import annotations

import pytest

import memops_testing as mt

pytestmark = pytest.mark.gpu


# What every version script below begins with: the modules, the GPU and `put` (arrays onto it).
_PRELUDE = r"""
import jax, numpy as np, jax.numpy as jnp, jax_memops as jm, sys
sys.path.insert(0, {tests!r})
import memops_testing as mt
gpu = jax.devices("gpu")[0]
put = lambda *a: [jax.device_put(t, gpu) for t in a]
"""

# The norm forward versions (cpp/norm_fwd.cu), each forced for every dtype by JAX_MEMOPS_NORM_FWD (read once per
# process, so each runs in a fresh interpreter): v4 (norm_fwd_half.cuh: 4 packs per thread; the f32
# default) and v3 (norm_rows.cuh: 8 packs; the 16-bit default but for LayerNorm team rows that 6 packs cover
# with as many threads: C <= 199, 768, 769 here, 301 x 769 misaligned); "" the default. Their classes, f32 /
# 16-bit:
#   team rows (tpr 4..32): C <= 515 / 1031 -- (1, 1), (7, 3), (300, 33) edges only or mostly; (60001, 64)
#     many rows; (8001, 515) the last f32 team width (tpr 32), many rows;
#   block rows (64..768 threads): (129, 516) f32 64 threads / team; (20, 1000); (300, 1001) misaligned;
#     (8001, 768) many rows of 64-thread blocks (more rows than resident blocks); (65, 1031) / (65, 1032)
#     the last 16-bit team width / 16-bit block rows of 64; (33, 4097) misaligned; (700, 12288) many rows;
#     (9, 12289); (5, 12291) the last f32 v4 width (768 threads);
#   v3 beyond: (5, 12292) f32 v3 block rows / 16-bit v4; (5, 24583) the last 16-bit v4 width; (3, 24584)
#     16-bit v3 block rows / f32 v1; (3, 50257) v1 for all.
#   and (1, 2048) one row (f32 128-thread block rows / 16-bit 32-thread team rows under v3), (3, 8192) (block rows
#   of 512 / 128 threads, 256 under v4).
# The default (v23) runs bf16 LayerNorm rows of whole packs with one parameter row on norm_fwd_lean.cuh's kernel:
# team rows of 6 packs (60001, 64), (8001, 768), (65, 1032) and of 8 (1, 2048), (20, 1000) (slots left empty);
# block rows (3, 8192), (700, 12288) every slot used, (3, 24584) not; v21 is the rule before it. Since v28 its team
# rows read the parameters from a copy staged in shared memory (v23: loaded in pass 3), and rows without a bias take
# it too. Under a persistent grid too (several rows per block, the copy staged once). Since v29 (v28: the rule before)
# the lean kernel's block rows take lean_block_packs: f32 (65, 1032), (1, 2048) at 3 packs, (97, 4096) at 4 (LayerNorm)
# / 2 (RMSNorm), (3, 8192) at 4 ((20, 1000), (8001, 768) and (700, 12288) stay on v4); bf16 LayerNorm (97, 4096) at 4.
# Since v44 (v29: the rule before) the lean rows read x by __ldg and store y plainly, and lean_block_plan holds the
# parameters of f32 block rows in registers: RMSNorm's all of them, LayerNorm's (65, 1032) and (1, 2048) at 4 packs
# ((65, 1032): slots past the row hold zeros); scale-only and parameter-free rows through the same instances. Since
# v45 (v44: the rule before) v4's rows read x by __ldg and store y plainly (f32 (8001, 515) team rows, (301, 769),
# (700, 12288) block rows), and f32 rows of 129..256 packs take the lean block rows with their parameters held: (8001,
# 768) at 3 packs, (129, 516) at 3 and (20, 1000) at 4 with slots left empty. Since v48 (v45: the rule before) bf16
# rows of 512..1536 packs run two rows per block (lean_pair_plan): (97, 4096), (3, 8192) at 3 packs (odd rows: the last
# block's second row empty), (5, 10000) at 4, (700, 12288) at 3 (RMSNorm 4); the persistent grid strides over them.
# v67 (a candidate) puts f16 rows of whole packs on the lean kernel too, at 4 packs per thread to 384 threads: team
# rows (60001, 64), (8001, 768), (20, 1000) (slots left empty), block rows (65, 1032) of 64 threads (slots left empty),
# (1, 2048), (97, 4096), (3, 8192), (5, 10000) of 320, (700, 12288) of 384, NaN entries and constant rows among them;
# (3, 24584) beyond, on v3's rows. The default since v68 (v65: the rule before) does so but for LayerNorm's blocks over
# 256 threads ((5, 10000), (700, 12288) stay on v3's rows; RMSNorm's take the lean kernel).
_NORM_V4_SCRIPT = _PRELUDE + r"""
rng = np.random.default_rng(19)
shapes = [(1, 1), (7, 3), (300, 33), (60001, 64), (8001, 515), (129, 516), (20, 1000), (300, 1001), (8001, 768),
          (301, 769), (65, 1031), (65, 1032), (1, 2048), (3, 8192), (97, 4096), (33, 4097), (5, 10000), (700, 12288),
          (9, 12289), (5, 12291), (5, 12292), (5, 24583), (3, 24584), (3, 50257)]
ln, rms = jax.jit(jm.layer_norm), jax.jit(jm.rms_norm)
ln0, rms0 = jax.jit(lambda t: jm.layer_norm(t)), jax.jit(lambda t: jm.rms_norm(t))
ln_s = jax.jit(lambda t, p: jm.layer_norm(t, p))  # one parameter absent: 16-byte loads of the other (v28)
for dtype in mt.DTYPES:
    for rows, c in shapes:
        x = mt.randn(rng, (rows, c), np.float32, scale=2.0, loc=0.5)
        if rows > 2:
            x[1, c // 2] = np.nan
            x[2, :] = 1.25
        x = x.astype(dtype)
        s, b = mt.randn(rng, (c,), loc=1.0), mt.randn(rng, (c,))
        what = f"{{dtype}} {{(rows, c)}}"
        tol = mt.FWD_TOL[dtype]
        args = put(x, s, b)
        mt.poison(gpu, (2, rows, c))
        mt.assert_close(ln(*args), mt.ref_layer_norm(x, s, b), tol, dtype=dtype, what="layer_norm " + what)
        mt.poison(gpu, (2, rows, c))
        mt.assert_close(rms(*args[:2]), mt.ref_rms_norm(x, s), tol, dtype=dtype, what="rms_norm " + what)
        mt.assert_close(ln0(*put(x)), mt.ref_layer_norm(x), tol, dtype=dtype, what="layer_norm no params " + what)
        mt.poison(gpu, (2, rows, c))
        mt.assert_close(ln_s(*args[:2]), mt.ref_layer_norm(x, s), tol, dtype=dtype, what="layer_norm scale only " + what)
        mt.assert_close(rms0(*put(x)), mt.ref_rms_norm(x), tol, dtype=dtype, what="rms_norm no params " + what)
for dtype in (mt.F32, mt.BF16):
    for n, r, c in ((3, 5, 33), (2, 7, 1001), (2, 3, 4097), (4, 9, 1027)):
        x = mt.randn(rng, (n, r, c), dtype)
        s, b = mt.randn(rng, (n, c), loc=1.0), mt.randn(rng, (n, c))
        y = jax.jit(jax.vmap(jm.layer_norm))(*put(x, s, b))
        z = jax.jit(jax.vmap(jm.rms_norm))(*put(x, s))
        for k in range(n):
            mt.assert_close(y[k], mt.ref_layer_norm(x[k], s[k], b[k]), mt.FWD_TOL[dtype], dtype=dtype, what=f"vmap y[{{k}}]")
            mt.assert_close(z[k], mt.ref_rms_norm(x[k], s[k]), mt.FWD_TOL[dtype], dtype=dtype, what=f"vmap rms y[{{k}}]")
lne = lambda a, p, q: jm.layer_norm(a, p, q, epsilon=1e-12)
for c in (33, 515, 768, 1001, 1024, 2056, 4096, 4097, 12288, 12291, 24580):
    x = (1e4 + 1e-2 * rng.standard_normal((37, c))).astype(np.float32)
    s, b = mt.randn(rng, (c,), loc=1.0), mt.randn(rng, (c,))
    g = mt.randn(rng, x.shape, scale=1.0)
    mt.assert_close(jax.jit(lne)(*put(x, s, b)), mt.ref_layer_norm(x, s, b, 1e-12), 1e-4, dtype=mt.F32, what=f"large mean {{c}}")
    dx = jax.jit(lambda a, p, q, h: jax.vjp(lne, a, p, q)[1](h)[0])(*put(x, s, b, g))
    rdx = mt.ref_layer_norm_vjp(x, s, b, 1e-12, g)[0]
    mt.assert_close(dx, rdx, 1e-3, dtype=mt.F32, what=f"large mean dx {{c}}", mag=mt.ref_layer_norm_vjp_mag(x, s, 1e-12, g))
print("OK")
"""


@pytest.mark.parametrize("version,grid", [("v4", ""), ("v3", ""), ("v4", "persistent"), ("v3", "persistent"),
                                          ("v21", ""), ("v23", ""), ("v28", ""), ("v29", ""), ("v44", ""), ("v45", ""),
                                          ("v65", ""), ("v67", ""), ("", ""), ("", "persistent")])
def test_norm_forward_versions(gpu, version, grid):
    mt.run_script(_NORM_V4_SCRIPT, 600, env={"JAX_MEMOPS_NORM_FWD": version, "JAX_MEMOPS_GRID": grid},
                  compile_cache=True)


# y in another dtype than x (the ops' `dtype`), forward: "" the default (v68: v65's, and the f16 pairs as v66 puts them
# but for LayerNorm's f16 x into f32 over 256 threads, (700, 12288), on v3's rows; v65: the lean rows for f32 x into
# bf16 on their tuned block rows of 3-4 packs, (8001, 768), (20, 1000), (1, 2048), (97, 4096) LayerNorm, (3, 8192), and
# bf16 x into f32 at 4 packs per thread, RMSNorm too, storing y in whole 32-byte sectors, lane pairs swapping halves,
# but for LayerNorm's rows of 3 packs a thread or blocks over 256 threads, (8001, 768), (700, 12288), which fill half
# sectors: team rows up to C = 1024, (300, 32), (8001, 768) and (20, 1000) slots left empty, where an odd lane past the
# row stores its even partner's high half; block rows beyond, (1, 2048) of 64 threads, (97, 4096), (3, 8192), (700,
# 12288) of 384; the rest on v3's rows: f32 x into bf16 outside the tuned block rows and f32 x into f16 reading x by
# __ldg and storing y plainly, bf16 x into f16 streaming, and f16 x or bf16 beyond 384 threads into f32 storing whole
# sectors, lane pairs exchanging half of x's pack, RMSNorm at every C, LayerNorm to C = 12288 ((20, 1000), some of (33,
# 4097)'s rows, which start at every alignment, end in a pair with one pack; beyond, (5, 16384), (3, 24584), streaming);
# (7, 3) rows of scalar edges only), v62 (the rule before v65: the lean rows' whole sectors at every C, v3's rows into
# f32 streaming), v63 (v62, and v3's rows from f16 or bf16 x into f32 in whole sectors at every C), v66 (v65, and the
# f16 pairs on the lean rows as bf16's: f16 x into f32 at 4 packs per thread to C = 12288, f32 x into f16 on the tuned
# block rows), v61 (the rule before v62: each store of the bf16 lean rows into f32 fills half of its sectors), v60 (v61
# but v3's rows all cached), v58 (v61 but v3's rows all streaming), v57 (the rule before v60: bf16 x into f32 on
# LayerNorm's team rows alone, at v3's packs, (300, 32), (8001, 768), (20, 1000), (1, 2048); v3's rows streaming
# elsewhere) and v48 (norm_fwd_mixed for every row: v3's register rows where x and y are aligned, else the v1 row
# kernel).
_NORM_OUT_DTYPE_SCRIPT = _PRELUDE + r"""
rng = np.random.default_rng(23)
shapes = [(7, 3), (300, 32), (8001, 768), (20, 1000), (1, 2048), (97, 4096), (33, 4097), (3, 8192), (700, 12288),
          (5, 16384), (3, 24584)]
pairs = ((mt.BF16, mt.F32), (mt.F32, mt.BF16), (mt.BF16, mt.F16), (mt.F16, mt.F32), (mt.F32, mt.F16))
for x_dtype, y_dtype in pairs:
    ln = jax.jit(lambda t, p, q: jm.layer_norm(t, p, q, dtype=y_dtype))
    ln0 = jax.jit(lambda t: jm.layer_norm(t, dtype=y_dtype))
    rms = jax.jit(lambda t, p: jm.rms_norm(t, p, dtype=y_dtype))
    for rows, c in shapes:
        x = mt.randn(rng, (rows, c), x_dtype, scale=2.0, loc=0.5)
        s, b = mt.randn(rng, (c,), loc=1.0), mt.randn(rng, (c,))
        what = f"{{mt.dtype_id(x_dtype)}} into {{mt.dtype_id(y_dtype)}} {{(rows, c)}}"
        tol = mt.FWD_TOL[mt.F32] * 10
        mt.poison(gpu, (2, rows, c))
        y = ln(*put(x, s, b))
        assert y.dtype == y_dtype, (y.dtype, what)
        mt.assert_close(y, mt.ref_layer_norm(x, s, b), tol, dtype=y_dtype, what="layer_norm " + what)
        mt.poison(gpu, (2, rows, c))
        mt.assert_close(ln0(*put(x)), mt.ref_layer_norm(x), tol, dtype=y_dtype, what="layer_norm no params " + what)
        mt.poison(gpu, (2, rows, c))
        mt.assert_close(rms(*put(x, s)), mt.ref_rms_norm(x, s), tol, dtype=y_dtype, what="rms_norm " + what)
print("OK")
"""


@pytest.mark.parametrize("version", ["", "v65", "v62", "v63", "v66", "v48", "v57", "v58", "v60", "v61"])
def test_norm_forward_out_dtype_versions(gpu, version):
    mt.run_script(_NORM_OUT_DTYPE_SCRIPT, 600, env={"JAX_MEMOPS_NORM_FWD": version}, compile_cache=True)


# The fused backward versions (cpp/norm_bwd.cu, JAX_MEMOPS_NORM_BWD, read once per process): "" the default (v36: v35's
# kernels, but 16-bit rows whose power-of-two team leaves slots empty on teams of a multiple of 32 threads), v35 (v34's
# kernels, but LayerNorm's 16-bit staged rows of K = 3 read from their stages in both passes, the partials in
# registers), v34 (v33's kernels, and the f32 rows of C = 8196..12288 on 512-thread teams of K = 6 read from two stages
# in both passes), v34-chunks (those rows of RMSNorm in registers, through one stage in parts), v33 (v32's kernels, but
# 16-bit teams of 256 or 512 threads, or of 128 at K = 2, and f32 LayerNorm's teams of 512 take their rows through two
# stages of shared memory (bulk copies), and RMSNorm's 16-bit rows of 769..1024 packs one 512-thread team of K = 2), v32
# (v20's norm_bwd_lean.cuh — 16-bit registers prefetch the next row and hold the scale in LayerNorm, two rows ahead in
# RMSNorm; K = 3 rows one row ahead with the scale held, LayerNorm's partials in shared memory; f32 neither — with each
# team at its own barrier, and RMSNorm's 16-bit rows of 769..1024 packs on 256-thread teams of K = 4, partials in shared
# memory), v31 (K = 3 rows without the prefetch), v30 (v20's kernels: one barrier per block, RMSNorm as LayerNorm), v19
# (one row ahead for both), v19-hold, v19-lean, v19-deep (two rows ahead for both) and v18 (norm_bwd_fused_kernel). The
# lean kernel's 16-bit classes (C % 8 == 0, C <= 12288, one scale row), with K = ceil(packs / tpr) packs per thread, tpr
# = team_size(packs, 3) (v31, v32: RMSNorm from 769 to 1024 packs 256):
#   K = 2 full rows: C = 16 (tpr 1), 1024 (64), 2048 (128, staged), 4096 (256, staged), 8192 (512, staged); not
#   full: C = 8 (one pack), 1000 (125 of 128), 6152 (769 packs, staged);
#   K = 3 full: C = 24 (tpr 1), 768 (32), 3072 (128, LayerNorm staged), 6144 (256, staged), 12288 (512, staged); not
#   full: C = 40, 600, 2560 (128, LayerNorm staged), 5000 (256, staged), 10000, 8200 (512, staged);
#   K = 4 (RMSNorm, v31 and v32): C = 8192 full, 6152 not;
# f32 (v20: C % 4 == 0, tpr = team_size(packs, 4), K = 4 alone): 16 (tpr 1), 1024, 8192 full (LayerNorm staged),
# 1000 not; the rest of the cases (K = 3, or C > 8192) the old kernel. Staged rows: one or two per team (a stage
# filled once), many (each stage refilled, its phase flipping; teams of one block ending a step apart).
# Rows: one; a few (inactive teams in the last block); many (several rows per team, the prefetch ring
# ending on either buffer: odd and even counts). Each with a constant row (and a NaN row where the row
# count is odd), NaN poured into the memory each run's outputs take, dx / dscale / dbias against float64;
# dx alone (jax.grad with respect to x); large mean / tiny variance; bitwise determinism of the gradients run
# after run. Outside the class (the old kernel): no scale, vmapped scales.
_NORM_BWD_SCRIPT = _PRELUDE + r"""
rng = np.random.default_rng(23)
def poison(shape):  # NaN in the memory the next outputs take: an element left unwritten stays NaN
    mt.poison(gpu, (2,) + shape)
ln = jax.jit(lambda x, s, b, g: jax.vjp(jm.layer_norm, x, s, b)[1](g))
rms = jax.jit(lambda x, s, g: jax.vjp(jm.rms_norm, x, s)[1](g))
ln_dx = jax.jit(jax.grad(lambda x, s, b, g: jnp.sum(jm.layer_norm(x, s, b).astype(jnp.float32) * g)))
ln0 = jax.jit(lambda x, g: jax.vjp(jm.layer_norm, x)[1](g))
cases = [(1, 16), (3, 1024), (4097, 1024), (4098, 1024), (2, 8192), (301, 8192), (9, 8), (1000, 8), (5, 1000),
         (2001, 1000), (1, 24), (999, 24), (7, 768), (3001, 768), (2, 12288), (263, 12288), (5, 40), (77, 600),
         (3, 10000), (140, 10000), (2, 6144), (77, 6144), (3, 6152), (299, 6152), (1, 8200), (133, 8200),
         (3, 2048), (1001, 2048), (2, 4096), (517, 4096), (3, 5000), (261, 5000), (3, 2560), (1001, 3072),
         (3, 2304), (1001, 2304), (517, 4608), (299, 3584), (263, 5120), (133, 7168), (140, 9216)]
for dtype in (mt.BF16, mt.F16, mt.F32):
    tol = mt.GRAD_TOL[dtype]
    for rows, c in cases:
        x = mt.randn(rng, (rows, c), np.float32, scale=2.0, loc=0.5)
        if rows > 2:
            x[2, :] = 1.25
        if rows > 2 and rows % 2:  # (a NaN row makes every column's dscale NaN: not in the even cases)
            x[1, c // 2] = np.nan
        x = x.astype(dtype)
        s, b = mt.randn(rng, (c,), loc=1.0), mt.randn(rng, (c,))
        g = mt.randn(rng, (rows, c), dtype, scale=1.0)
        what = f"{{dtype}} {{(rows, c)}}"
        args = put(x, s, b, g)
        poison((rows, c))
        dx, ds, db = ln(*args)
        rdx, rds, rdb = mt.ref_layer_norm_vjp(x, s, b, 1e-5, g)
        mag = mt.ref_layer_norm_vjp_mag(x, s, 1e-5, g)
        mt.assert_close(dx, rdx, tol, dtype=dtype, what="layer_norm dx " + what, mag=mag)
        mt.assert_close(ds, rds, tol, dtype=mt.F32, what="layer_norm dscale " + what)
        mt.assert_close(db, rdb, tol, dtype=mt.F32, what="layer_norm dbias " + what)
        poison((rows, c))
        again = ln(*args)
        for name, u, v in zip(("dx", "dscale", "dbias"), (dx, ds, db), again):
            mt.assert_bitwise_equal(np.asarray(u), np.asarray(v), name + " twice " + what)
        poison((rows, c))
        mt.assert_close(ln_dx(*args), rdx, tol, dtype=dtype, what="layer_norm dx alone " + what, mag=mag)
        poison((rows, c))
        dx, ds = rms(*put(x, s, g))
        rdx, rds = mt.ref_rms_norm_vjp(x, s, 1e-6, g)
        mt.assert_close(dx, rdx, tol, dtype=dtype, what="rms_norm dx " + what, mag=mt.ref_rms_norm_vjp_mag(x, s, 1e-6, g))
        mt.assert_close(ds, rds, tol, dtype=mt.F32, what="rms_norm dscale " + what)
        poison((rows, c))
        (dx,) = ln0(*put(x, g))
        rdx = mt.ref_layer_norm_vjp(x, None, None, 1e-5, g)[0]
        mt.assert_close(dx, rdx, tol, dtype=dtype, what="layer_norm no params dx " + what,
                        mag=mt.ref_layer_norm_vjp_mag(x, None, 1e-5, g))
    x = (1e4 + 64.0 * rng.standard_normal((65, 1024))).astype(dtype)
    s, b, g = mt.randn(rng, (1024,), loc=1.0), mt.randn(rng, (1024,)), mt.randn(rng, (65, 1024), dtype, scale=1.0)
    lne = jax.jit(lambda a, p, q, h: jax.vjp(lambda u, v, w: jm.layer_norm(u, v, w, epsilon=1e-12), a, p, q)[1](h))
    poison((65, 1024))
    got = lne(*put(x, s, b, g))
    want = mt.ref_layer_norm_vjp(x, s, b, 1e-12, g)
    mt.assert_close(got[0], want[0], tol, dtype=dtype, what="large mean dx", mag=mt.ref_layer_norm_vjp_mag(x, s, 1e-12, g))
    mt.assert_close(got[1], want[1], tol, dtype=mt.F32, what="large mean dscale")
x = mt.randn(rng, (3, 5, 1024), mt.BF16)
s, b, g = mt.randn(rng, (3, 1024), loc=1.0), mt.randn(rng, (3, 1024)), mt.randn(rng, (3, 5, 1024), mt.BF16, scale=1.0)
poison((15, 1024))
got = jax.jit(jax.vmap(lambda a, p, q, h: jax.vjp(jm.layer_norm, a, p, q)[1](h)))(*put(x, s, b, g))
for k in range(3):
    want = mt.ref_layer_norm_vjp(x[k], s[k], b[k], 1e-5, g[k])
    mt.assert_close(got[0][k], want[0], mt.GRAD_TOL[mt.BF16], dtype=mt.BF16, what=f"vmap dx[{{k}}]",
                    mag=mt.ref_layer_norm_vjp_mag(x[k], s[k], 1e-5, g[k]))
    mt.assert_close(got[1][k], want[1], mt.GRAD_TOL[mt.BF16], dtype=mt.F32, what=f"vmap dscale[{{k}}]")
print("OK")
"""


@pytest.mark.parametrize(
    "version", ["", "v35", "v36-k2", "v36-k3", "v34", "v34-chunks", "v33", "v32", "v31", "v30", "v19", "v19-hold",
                "v19-lean", "v19-deep", "v18"])
def test_norm_backward_versions(gpu, version):
    mt.run_script(_NORM_BWD_SCRIPT, 600, env={"JAX_MEMOPS_NORM_BWD": version}, compile_cache=True)


# The norms' forward-mode kernel (cpp/norm_jvp.cu) under its launch plans (JAX_MEMOPS_NORM_JVP): v1, 512-thread rows
# planned for 64 registers; v2, rows of at most 256 threads, two per SM; "" the default, v3: v2 up to 2048 packs a row
# ((3, 8192) f32, (3, 12288) and (2, 16384) bf16 / f16), v1 beyond ((3, 12288) f32, (2, 16384) f32, (2, 12289) every
# dtype: unaligned, one element a pack). y and its tangent against float64, with a NaN row and a constant row.
_NORM_JVP_SCRIPT = _PRELUDE + r"""
rng = np.random.default_rng(41)
ln = jax.jit(lambda p, t: jax.jvp(jm.layer_norm, p, t))
rms = jax.jit(lambda p, t: jax.jvp(jm.rms_norm, p, t))
cases = [(9, 33), (5, 1000), (301, 1024), (3, 4096), (3, 8192), (257, 8192), (3, 12288), (131, 12288), (2, 12289),
         (2, 16384), (67, 16384), (2, 16392)]
for dtype in (mt.BF16, mt.F16, mt.F32):
    for rows, c in cases:
        x = mt.randn(rng, (rows, c), np.float32, scale=2.0, loc=0.5)
        x[1, c // 3] = np.nan
        if rows > 2:
            x[2, :] = -0.75
        x = x.astype(dtype)
        t = mt.randn(rng, (rows, c), dtype, scale=1.0)
        s, b, ts, tb = mt.randn(rng, (c,), loc=1.0), mt.randn(rng, (c,)), mt.randn(rng, (c,)), mt.randn(rng, (c,))
        what = f" {{dtype}} {{(rows, c)}}"
        y, ty = ln(put(x, s, b), put(t, ts, tb))
        mt.assert_close(y, mt.ref_layer_norm(x, s, b), mt.FWD_TOL[dtype], dtype=dtype, what="layer_norm y" + what)
        want, mag = mt.ref_layer_norm_jvp(x, s, t, ts, tb)
        mt.assert_close(ty, want, mt.GRAD_TOL[dtype], dtype=dtype, what="layer_norm tangent" + what, mag=mag)
        y, ty = rms(put(x, s), put(t, ts))
        mt.assert_close(y, mt.ref_rms_norm(x, s), mt.FWD_TOL[dtype], dtype=dtype, what="rms_norm y" + what)
        want, mag = mt.ref_rms_norm_jvp(x, s, t, ts)
        mt.assert_close(ty, want, mt.GRAD_TOL[dtype], dtype=dtype, what="rms_norm tangent" + what, mag=mag)
print("OK")
"""


@pytest.mark.parametrize("version", ["", "v1", "v2"])
def test_norm_jvp_plans(gpu, version):
    mt.run_script(_NORM_JVP_SCRIPT, 600, env={"JAX_MEMOPS_NORM_JVP": version}, compile_cache=True)
