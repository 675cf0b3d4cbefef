"""jm.softmax's CUDA kernels under their A/B switches (cpp/softmax_fwd.cu, softmax_bwd.cu, softmax_launch.cuh: read
once per process from the environment, so each variant runs in a fresh interpreter): the forward's and the
backward's versions, the L2 two-pass rule, the grids, the bulk-copy clusters' plans and merges, each against the
float64 reference and, where the plan log says it, the kernel the rule picked. GPU only, and slow."""

from __future__ import annotations

import re

import jax
import pytest

import memops_testing as mt


# The forward's A/B switch (cpp/softmax_fwd.cu): JAX_MEMOPS_SOFTMAX_FWD, read once per process, so each
# version runs in a fresh interpreter; every class of each version against the float64 reference.
# Rows of 12 or more end with mt.special_rows (NaN, +inf, all -inf, masked halves, huge logits, ...); rows
# of 4 or more have row 3's first half -inf (threads of only -inf in the block rows: their kept exps
# rescale to 0). VERSION_SHAPES: sub-warp rows (33 with 40000 rows: more row groups than resident CTAs;
# 255..257), block rows (1000, 4095, 4097, 8192 with more rows than resident CTAs), and the bulk-copy
# cluster from 8193 (misaligned) to 600001 (v3: two buffers do not fit at f32, the stream class runs).
_VERSION_SCRIPT = r"""
import jax, numpy as np, jax.numpy as jnp, jax_memops as jm, sys
sys.path.insert(0, {tests!r})
import memops_testing as mt
rng = np.random.default_rng(0)
for dtype in mt.DTYPES:
    for rows, c in {shapes!r}:
        x = mt.randn(rng, (rows, c), np.float32, scale=3.0)
        x[0, ::3] = -np.inf
        if rows >= 3:
            x[1] = -np.inf
            x[2, c // 2] = np.nan
        if rows > 3:
            x[3, : c // 2] = -np.inf
        if rows >= 12:
            x[-10:] = mt.special_rows(rng, c, np.float32)
        x = x.astype(dtype)
        y = jax.jit(jm.softmax)(jax.device_put(x, jax.devices("gpu")[0]))
        mt.assert_close(y, mt.ref_softmax(x), mt.FWD_TOL[dtype], dtype=dtype, what=f"{{dtype}} {{(rows, c)}}")
print("OK")
"""
VERSION_SHAPES = [(40000, 33), (5000, 255), (5000, 256), (3000, 257), (300, 1000), (600, 4095), (50, 4097),
                  (600, 8192), (20, 8193), (30, 20000), (300, 50257), (40, 131072), (3, 600001)]


def _run_script(script, shapes, **env_vars):
    return mt.run_script(script, env=env_vars, compile_cache=True, shapes=shapes)


def _run_fwd_script(shapes, **env_vars):
    return _run_script(_VERSION_SCRIPT, shapes, **env_vars)


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize("version", ["v2", "v3-prefetch", "v3", "v5", "v5-s1", "v5-reg", "v7-512", "v9", "v9-wide",
                                     "v9-wide-512", "v14", "v20", "v21", "v23", "v24", "v25", "v26", "v27",
                                     "v49", "v50", "v72", "v73", "v74", "v75", "v76", "v77", "v78"])
def test_gpu_fwd_versions(gpu, version):
    _run_fwd_script(VERSION_SHAPES, JAX_MEMOPS_SOFTMAX_FWD=version)


# v77 runs v75's f32 bulk-copy clusters at twice v75's cluster size where that is at most 16, its 16-bit ones at v75's;
# v79 (the default) the same f32 clusters on the register kernels (8 packs per thread where a CTA's share fits them,
# else 16, else one buffer); v76 doubles every cluster, on one buffer; v78 doubles the 16-bit ones only where v75's plan
# is one buffer. The plan logs of the five over the same shapes say so: VERSION_SHAPES, the > 2**31-element test's f32
# rows, and 16-bit rows too many for L2 (300 rows: more than the 264 in flight; 100000 and 131072 exceed L2's share on
# both cards, 65536 on the H100 only, where the rule's 16-bit plan is the register kernel).
LONG_16BIT_SHAPES = [(300, 65536), (300, 100000), (300, 131072)]


def _bulk_plans(version):
    err = _run_fwd_script(VERSION_SHAPES + [(100, 100000), (20, 262144)] + LONG_16BIT_SHAPES,
                          JAX_MEMOPS_SOFTMAX_FWD=version, JAX_MEMOPS_SOFTMAX_PLAN_LOG="1")
    plans = re.findall(r"softmax_fwd plan: (one buffer|registers \(\d+\))[^\n]* rows=(\d+) cols=(\d+) k=(\d+) "
                       r"elem=(\d)B", err)
    return {(rows, cols, elem): (variant, int(k)) for variant, rows, cols, k, elem in plans}, err


# One case per version (each ~1 min: two interpreters, v75's and its own), so xdist runs them side by side.
@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize("version", ["", "v76", "v77", "v78"], ids=["default", "v76", "v77", "v78"])
def test_gpu_fwd_k_mult(gpu, version):
    base, err = _bulk_plans("v75")
    assert {elem for _, _, elem in base} == {"2", "4"}, err[-4000:]
    plans, err = _bulk_plans(version)
    name = version or "default"
    assert plans.keys() == base.keys(), f"{name}\n" + err[-4000:]
    for key, (variant, k) in plans.items():
        doubled = version == "v76" or key[2] == "4" or (version == "v78" and base[key][0] == "one buffer")
        want = 2 * base[key][1] if doubled and 2 * base[key][1] <= 16 else base[key][1]
        assert k == want, f"{name} {key}: k={k}, v75's {base[key]}\n" + err[-4000:]
        if version == "" and key[2] == "4":
            chunk = -(-(-(-int(key[1]) // 4)) // k)  # a CTA's share in 16-byte packs, over 256 threads
            regs = "registers (8)" if chunk <= 8 * 256 else "registers (16)" if chunk <= 16 * 256 else None
            assert variant == (regs or "one buffer"), f"{name} {key}: {variant}, a share of {chunk} packs"
        else:
            assert not doubled or k == base[key][1] or variant == "one buffer", f"{name} {key}: {variant}"
            assert doubled or variant == base[key][0], f"{name} {key}: {variant}, v75's {base[key]}"


# v79 (the default), v78, v77, v76, v75 and v73 (A/B versions; cpp/softmax_fwd_tma.cuh): the bulk-copy clusters (v75,
# v77, v79: of f32; v78: of f32 and of one buffer; v76: all, on one buffer; v73: of one buffer or registers, 16-bit
# too) take their rows past the first two by tickets, from a ring of counter pairs that each launch's last CTA zeroes
# for the slot's next launch.
# TICKET_SHAPES on the ticket kernels (many rows per cluster; one row; misaligned; f32 one buffer, 16-bit registers; the
# message merge and the barrier's at the forced k), each launched TICKET_LAUNCHES times, more than the ring's 1024
# slots, so every slot is reused: every output bitwise the first, which matches float64. The plan log must say tickets
# for every bulk-copy launch of one buffer or registers under v73, for the f32 launches under the default, v75 and
# v77, none under v74 or v50; under v76 (every one-buffer cluster by tickets at twice the rule's k) for every bulk-copy
# launch, all of one buffer; under v78 for the f32 launches and the 16-bit ones of one buffer.
TICKET_SHAPES = [(320, 50257), (1, 50257), (130, 131072), (261, 131073)]
TICKET_LAUNCHES = 1100
_TICKET_SCRIPT = r"""
import jax, numpy as np, jax.numpy as jnp, jax_memops as jm, sys
sys.path.insert(0, {tests!r})
import memops_testing as mt
rng = np.random.default_rng(1)
f = jax.jit(jm.softmax)
count = jax.jit(lambda n, y, y0: n + jnp.logical_not(jnp.array_equal(y, y0, equal_nan=True)).astype(jnp.int32))
for dtype in (mt.F32, mt.BF16):
    for rows, c in {shapes!r}:
        x = mt.randn(rng, (rows, c), np.float32, scale=3.0)
        if rows >= 12:
            x[-10:] = mt.special_rows(rng, c, np.float32)
        x = x.astype(dtype)
        xd = jax.device_put(x, jax.devices("gpu")[0])
        y0 = f(xd)
        mt.assert_close(y0, mt.ref_softmax(x), mt.FWD_TOL[dtype], dtype=dtype, what=f"{{dtype}} {{(rows, c)}}")
        differ = jnp.int32(0)
        for _ in range({launches}):
            differ = count(differ, f(xd), y0)
        assert int(differ) == 0, f"{{dtype}} {{(rows, c)}}: {{int(differ)}} launches differ from the first"
print("OK")
"""


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize("version,k", [("v73", ""), ("v73", "1"), ("v73", "2"), ("v73", "16"), ("", ""), ("", "16"),
                                       ("v74", ""), ("v50", ""), ("v76", ""), ("v75", ""), ("v77", ""),
                                       ("v78", "")])
def test_gpu_fwd_tickets(gpu, version, k):
    env = dict(JAX_MEMOPS_SOFTMAX_FWD=version, JAX_MEMOPS_SOFTMAX_FWD_K=k, JAX_MEMOPS_SOFTMAX_PLAN_LOG="1")
    err = mt.run_script(_TICKET_SCRIPT, env=env, compile_cache=True, shapes=TICKET_SHAPES, launches=TICKET_LAUNCHES)
    plans = re.findall(r"softmax_fwd plan: (one buffer|registers \(\d+\)).* k=(\d+) .*", err)
    assert plans, "no bulk-copy launch:\n" + err[-4000:]
    lines = re.findall(r"softmax_fwd plan: (?:one buffer|registers).*", err)
    if not k:  # under the rule's k, bulk-copy launches of both sizes (a forced k = 1 fits no 16-bit row here)
        assert {re.search(r" elem=(\d)B ", line)[1] for line in lines} == {"2", "4"}, err[-4000:]
    for line in lines:
        want = version in ("v73", "v76") or (version in ("", "v75", "v77", "v78") and " elem=4B " in line)
        want = want or (version == "v78" and line.startswith("softmax_fwd plan: one buffer"))
        assert line.endswith(" tickets") == want, f"{version or 'default'}: {line}\n" + err[-4000:]
    assert not k or all(kk == k for _, kk in plans), err[-4000:]
    assert version != "v76" or all(p == "one buffer" for p, _ in plans), err[-4000:]


# v14: 16-bit rows of 32768 < C whose rows in flight (two 512-thread CTAs per SM, or the row count) fit
# a share of L2 take the two-pass kernel with L2 as the row buffer (softmax_fwd_l2.cuh): the default
# share (56%), all of L2 and none (0: v9's kernels). Every dtype against float64, with the special rows;
# the plan log says which rows took it. Where they go is asserted for the H200 (132 SMs, 60 MB of L2: 264
# rows in flight; C = 50257 takes 26 MB, 100000 53 MB, 131072 69 MB; few rows fit at any C).
L2_SHAPES = [(300, 50257), (40, 65536), (3, 40001), (24, 32769), (300, 100000), (300, 131072), (12, 131072)]


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize("share", ["", "100", "0"])
def test_gpu_fwd_l2_rule(gpu, share):
    err = _run_fwd_script(L2_SHAPES, JAX_MEMOPS_SOFTMAX_L2_SHARE=share, JAX_MEMOPS_SOFTMAX_PLAN_LOG="1")
    l2 = re.findall(r"l2 two-pass .* rows=(\d+) cols=(\d+)", err)
    if share == "0":
        assert not l2, err[-2000:]
    elif "H200" in jax.devices("gpu")[0].device_kind:
        want = {("300", "50257"), ("40", "65536"), ("3", "40001"), ("24", "32769"), ("12", "131072")}
        want |= {("300", "100000")} if share == "100" else set()
        assert set(l2) == want, err[-2000:]


# JAX_MEMOPS_GRID (cpp/cuda_base.cuh grid_for) forces one grid on every row kernel: persistent (the
# register classes, forward and backward, launch one CTA per row group by default) or full (both stream
# classes too: 600001 f32 forward, 700001 backward (262147: the stream class before v38); since v69 the bulk-copy
# and register clusters and the L2 two-pass rows, one cluster or CTA per row; the row groups of 33 and 8192 far
# outnumber the resident CTAs). The backward: dx of jm.softmax's VJP against the float64 reference
# over its classes (sub-warp, block, register cluster from 8193, stream), with mt.special_rows (NaN, +inf
# and all -inf rows give NaN; -inf entries give dx exactly 0).
_BWD_SCRIPT = r"""
import jax, numpy as np, jax_memops as jm, sys
sys.path.insert(0, {tests!r})
import memops_testing as mt
rng = np.random.default_rng(0)
gpu = jax.devices("gpu")[0]
vjp = jax.jit(lambda x, g: jax.vjp(jm.softmax, x)[1](g)[0])
for dtype in mt.DTYPES:
    for rows, c in {shapes!r}:
        print("case", np.dtype(dtype).name, c, file=sys.stderr, flush=True)
        x = mt.randn(rng, (rows, c), np.float32, scale=3.0)
        x[0, ::3] = -np.inf
        if rows >= 12:
            x[-10:] = mt.special_rows(rng, c, np.float32)
        x = x.astype(dtype)
        g = mt.randn(rng, (rows, c), dtype, scale=1.0)
        dx = mt.f64(vjp(jax.device_put(x, gpu), jax.device_put(g, gpu)))
        what = f"dx {{dtype}} {{(rows, c)}}"
        ref = mt.ref_softmax_vjp(x, g)
        mt.assert_close(dx, ref, mt.GRAD_TOL[dtype], dtype=dtype, what=what, mag=mt.ref_softmax_vjp_mag(x, g))
        fin = ~np.isnan(ref).all(-1)
        assert (dx[fin][mt.f64(x)[fin] == -np.inf] == 0).all(), what + ": dx at -inf entries must be 0"
print("OK")
"""
BWD_GRID_SHAPES = [(40000, 33), (5000, 255), (3000, 257), (300, 1000), (50, 4097), (600, 8192), (20, 8193),
                   (30, 50257), (12, 262147), (4, 700001)]


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize("grid", ["persistent", "full"])
def test_gpu_grid(gpu, grid):
    _run_fwd_script(VERSION_SHAPES, JAX_MEMOPS_GRID=grid)
    _run_script(_BWD_SCRIPT, BWD_GRID_SHAPES, JAX_MEMOPS_GRID=grid)


# The backward's A/B switch JAX_MEMOPS_SOFTMAX_BWD (cpp/softmax_bwd.cu): v9-1024 takes 1024-thread CTAs in the
# register clusters first (8193: k = 1 of 1024 threads; 50257: 4; 262147: beyond 8 x 1024 x 16, the
# stream), v9 the 8 CTAs of 1024 threads before 16 of 512 (f32 131072; the default: 16 of 512).
@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize("version", ["v9-1024", "v9"])
def test_gpu_bwd_versions(gpu, version):
    _run_script(_BWD_SCRIPT, BWD_GRID_SHAPES + [(40, 131072)], JAX_MEMOPS_SOFTMAX_BWD=version)


# The bulk-copy cluster plans (cpp/softmax_fwd.cu launch_fwd_tma) under their rules ("") and with the cluster
# size forced by JAX_MEMOPS_SOFTMAX_FWD_K, a power of two or not (where the forced k does not fit, the v2
# classes run): many rows per resident cluster (each buffer refilled with mbarrier parities 0, 1, 0, ...), one
# row, misaligned rows (8193, 50257, 131073), the special rows; k = 16 at 8193 (129 packs per CTA for 256
# threads: threads without packs; v7-512's 512-thread CTAs: more than half without); f32 400000 (v3's two
# buffers do not fit at k <= 16; one buffer does). The plan log must show the variant's CTA size and a
# launch at the forced k.
CLUSTER_SHAPES = [(1900, 8193), (3, 16385), (1, 50257), (320, 50257), (470, 32768), (130, 131072), (260, 131073),
               (12, 400000)]


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize("version,k", [("v5", ""), ("v5", "1"), ("v5", "2"), ("v5", "3"), ("v5", "16"),
                                       ("v5-s1", "16"), ("v5-reg", "16"), ("v3", ""), ("v3", "16"), ("v7-512", ""),
                                       ("v7-512", "16")])
def test_gpu_fwd_cluster_plans(gpu, version, k):
    err = _run_fwd_script(CLUSTER_SHAPES, JAX_MEMOPS_SOFTMAX_FWD=version, JAX_MEMOPS_SOFTMAX_FWD_K=k,
                          JAX_MEMOPS_SOFTMAX_PLAN_LOG="1")
    threads = 512 if version == "v7-512" else 256
    assert f"x {threads} threads" in err, f"no bulk-copy launch of {threads}-thread CTAs:\n" + err[-4000:]
    assert not k or f" k={k} " in err, f"no bulk-copy launch at k = {k}:\n" + err[-4000:]


# v50 (in the default; cpp/softmax_fwd.cu kTmaAheadPct): once a bulk-copy CTA's share of a row has landed, it
# prefetches the first 75% of its share of its next row into L2 at L2's evict_last priority; v49 the same at the normal
# priority; v27 prefetches nothing. CLUSTER_SHAPES (many rows per cluster, one row, misaligned rows, shares cut short at
# the row's end) against float64 under each ("v50" without tickets), at the rule's cluster sizes and at k = 1, 3 and
# 16; the plan log must show each launch's prefetch as the version gives (ceil(0.75 chunk) or 0 packs, "(evict_last)"
# for the default and v50 alone).
@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize("version,k", [("", ""), ("", "1"), ("", "3"), ("", "16"), ("v50", "16"), ("v49", ""),
                                       ("v49", "1"), ("v49", "16"), ("v27", "")])
def test_gpu_fwd_l2_ahead(gpu, version, k):
    err = _run_fwd_script(CLUSTER_SHAPES, JAX_MEMOPS_SOFTMAX_FWD=version, JAX_MEMOPS_SOFTMAX_FWD_K=k,
                          JAX_MEMOPS_SOFTMAX_PLAN_LOG="1")
    plans = re.findall(r"softmax_fwd plan: .* chunk=(\d+) packs .* ahead=(\d+) packs( \(evict_last\))?", err)
    assert plans, "no bulk-copy launch:\n" + err[-4000:]
    for chunk, ahead, keep in plans:
        want = 0 if version == "v27" else -(-int(chunk) * 75 // 100)
        assert int(ahead) == want, f"{version or 'default'}: chunk {chunk} prefetched {ahead} packs\n" + err[-4000:]
        kept = version in ("", "v50")
        assert bool(keep) == kept, f"{version or 'default'}: evict_last {bool(keep)}\n" + err[-4000:]


# JAX_MEMOPS_SOFTMAX_PUSH (cpp/softmax_launch.cuh push_min_cluster): how the bulk-copy cluster merges each
# row's (max, sum): by st.async messages into every CTA's inbox (mbarrier per row parity; kPush in
# softmax_fwd_tma.cuh) for every k ("1"), by the cluster barrier and DSMEM reads for every k ("0"), or the
# default rule (messages from k = 4: ""). CLUSTER_SHAPES under each variant's rule and at k = 2, 4, 16
# (many rows per cluster: the inbox slots and barrier phases cycle; k = 16: 16 senders per inbox).
@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize("push", ["0", "1", ""])
@pytest.mark.parametrize("version,k", [("v5", ""), ("v5", "2"), ("v5", "16"), ("v5-s1", "4"), ("v5-reg", "16"),
                                       ("v3", "")])
def test_gpu_fwd_push_reduce(gpu, version, k, push):
    err = _run_fwd_script(CLUSTER_SHAPES, JAX_MEMOPS_SOFTMAX_FWD=version, JAX_MEMOPS_SOFTMAX_FWD_K=k,
                          JAX_MEMOPS_SOFTMAX_PUSH=push, JAX_MEMOPS_SOFTMAX_PLAN_LOG="1")
    plans = re.findall(r"softmax_fwd plan: (.*?) x \d+ threads .* k=(\d+) ", err)
    assert plans, "no bulk-copy launch:\n" + err[-4000:]
    for variant, kk in plans:
        want = push == "1" or (push == "" and int(kk) >= 4)
        assert variant.endswith(", messages") == want, f"PUSH={push!r}: k = {kk} ran {variant!r}\n" + err[-4000:]


# The backward's register clusters under JAX_MEMOPS_SOFTMAX_PUSH: each row's sum(dy * y) merged by
# messages (mail_merge, softmax_rows.cuh) for every k ("1"), by the cluster barrier and DSMEM reads for
# every k ("0"), or by the rule (messages from k = 2 since v38, k = 4 before: ""), in the default cluster order and
# v9's.
# Clusters of k = 2 (f32 8193, bf16 32768), 3 (f32 16385), 4, 7 (f32 32768, 50257), 8, 9 (bf16 131073;
# under v9's order 5 of 1024 threads), 16 (f32 131072; under v9's order 8 of 1024); many rows per
# cluster (the inbox slots and barrier phases cycle), the special rows. The plan log must show every
# launch's merge as the variable asks (v38's plans among them: f32 16385 on 2 CTAs of 5 packs).
BWD_CLUSTER_SHAPES = [(20, 8193), (3, 16385), (470, 32768), (1, 50257), (320, 50257), (40, 131072), (60, 131073)]


def _cluster_plans(err, name):
    """(k, threads, merge, cols, clusters) of each register-cluster launch that the plan log (cpp/softmax_launch.cuh
    log_cluster_rows, JAX_MEMOPS_SOFTMAX_PLAN_LOG=1) names `name` ("softmax_bwd", "softmax_bwd v38", ...)."""
    pat = (re.escape(name) + r": register cluster k=(\d+) x (\d+) threads, merge by (\w+), rows=\d+ cols=(\d+) "
           r"clusters=(\d+)")
    return [(int(k), int(t), merge, int(c), int(n)) for k, t, merge, c, n in re.findall(pat, err)]


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize("push", ["0", "1", ""])
@pytest.mark.parametrize("order", ["", "v9"])
def test_gpu_bwd_push_reduce(gpu, order, push):
    err = _run_script(_BWD_SCRIPT, BWD_CLUSTER_SHAPES, JAX_MEMOPS_SOFTMAX_BWD=order, JAX_MEMOPS_SOFTMAX_PUSH=push,
                      JAX_MEMOPS_SOFTMAX_PLAN_LOG="1")
    plans = [(k, merge) for name in ("softmax_bwd", "softmax_bwd v42")
             for k, _, merge, _, _ in _cluster_plans(err, name)]
    assert plans, "no register-cluster launch:\n" + err[-4000:]
    for k, merge in plans:
        want = "messages" if push == "1" or (push == "" and int(k) >= 2) else "barrier"
        assert merge == want, f"PUSH={push!r}: k = {k} merged by {merge}\n" + err[-4000:]
    merges = {"": {"messages"}, "0": {"barrier"}, "1": {"messages"}}[push]
    assert {merge for _, merge in plans} == merges, f"PUSH={push!r}: merges {plans}\n" + err[-4000:]


# v37 (JAX_MEMOPS_SOFTMAX_BWD=v37, cpp/softmax_bwd.cu launch_bwd_v38): a long row whose register cluster of 512-thread
# CTAs takes fewer CTAs at 5 packs of y and dy per thread than at 4 runs that cluster (kBwdWidePacks). BWD_WIDE_SHAPES
# against float64 under it (many rows per cluster, one row, the special rows; misaligned rows), and the plan log
# must show exactly the clusters the rule gives: f32 16385 / 50257 / 131072 / 131073 on k = 2 / 5 / 13 / 13 (131073
# took the stream class before v38: 17 of 512 or 9 of 1024 CTAs), 16-bit 50257 / 131072 / 131073 / 262147 on 3 / 7 /
# 7 / 13 (16-bit 16385, k = 1, and f32 262147, k = 26, keep the default classes), each merged by messages (k >= 2
# since v38; JAX_MEMOPS_SOFTMAX_PUSH unset).
BWD_WIDE_SHAPES = [(3, 16385), (1, 50257), (320, 50257), (40, 131072), (60, 131073), (12, 262147)]
BWD_WIDE_PLANS = {(16385, 2), (50257, 5), (131072, 13), (131073, 13), (50257, 3), (131072, 7), (131073, 7),
                  (262147, 13)}


@pytest.mark.gpu
@pytest.mark.slow
def test_gpu_bwd_wide_clusters(gpu):
    err = _run_script(_BWD_SCRIPT, BWD_WIDE_SHAPES, JAX_MEMOPS_SOFTMAX_BWD="v37", JAX_MEMOPS_SOFTMAX_PLAN_LOG="1")
    plans = _cluster_plans(err, "softmax_bwd v37")
    assert {(c, k) for k, _, _, c, _ in plans} == BWD_WIDE_PLANS, f"plans {plans}\n" + err[-4000:]
    for k, threads, merge, c, _ in plans:
        assert threads == 512 and merge == "messages", (k, threads, merge, c)  # k >= 2 (kPushMinClusterBwd)


# v38 (JAX_MEMOPS_SOFTMAX_BWD=v38, the default before v39; cpp/softmax_bwd.cu launch_bwd_v38): the long rows' register
# clusters of 4 or 5 packs per thread (bwd_v38_choice: 5 where 4 does not fit 16 CTAs, or where 5 leave fewer thread
# slots idle without trading the messages' merge for the barrier's), on 512-thread CTAs, else on 16 of 1024 threads
# (rows that took the stream class before). BWD_V38_SHAPES against float64; the plan log must show exactly the clusters
# the rule gives beyond launch_auto's own: f32 16385 / 50257 / 100000 / 131073 on 2 / 5 / 10 / 13 of 512 threads (5
# packs), 262144 on 16 of 1024 (4 packs), 262147 / 327680 on 13 / 16 of 1024 (5 packs); 16-bit 100000 / 131073 / 262147
# / 327680 on 5 / 7 / 13 / 16 of 512 (5 packs), 50257 on 3 of 512 (5 packs: both merge by messages), 524288 on 16 of
# 1024 (4 packs), every one merged by messages. launch_auto keeps f32 131072 (16 of 512), 16-bit 16385, 131072 and
# 262144; f32 524288 takes the stream class.
BWD_V38_SHAPES = [(3, 16385), (1, 50257), (320, 50257), (2, 100000), (40, 131072), (60, 131073), (4, 262144),
                  (12, 262147), (2, 327680), (3, 524288)]
BWD_V38_PLANS = {(16385, 2, 512), (50257, 5, 512), (100000, 10, 512), (131073, 13, 512), (262144, 16, 1024),
                 (262147, 13, 1024), (327680, 16, 1024), (100000, 5, 512), (131073, 7, 512), (262147, 13, 512),
                 (327680, 16, 512), (50257, 3, 512), (524288, 16, 1024)}


@pytest.mark.gpu
@pytest.mark.slow
def test_gpu_bwd_v38_clusters(gpu):
    err = _run_script(_BWD_SCRIPT, BWD_V38_SHAPES, JAX_MEMOPS_SOFTMAX_BWD="v38", JAX_MEMOPS_SOFTMAX_PLAN_LOG="1")
    plans = _cluster_plans(err, "softmax_bwd v38")
    assert {(c, k, t) for k, t, _, c, _ in plans} == BWD_V38_PLANS, f"plans {plans}\n" + err[-4000:]
    assert {merge for _, _, merge, _, _ in plans} == {"messages"}, plans  # k >= 2 (kPushMinClusterBwd)
    narrow = r"softmax_bwd: register cluster k=16 x 512 threads, merge by messages, rows=\d+ cols=131072"
    assert re.search(narrow, err), err[-4000:]  # f32 131072: launch_auto's cluster


# v39 (JAX_MEMOPS_SOFTMAX_BWD=v39, the default before v42; cpp/softmax_bwd.cu bwd_y_held): where v38's clusters of 512
# threads do not fit, clusters that hold 8 packs of y per thread and read dy twice (softmax_bwd_rows_kernel's kHoldDy =
# false) on 512 threads, then v38's of 1024, then the y-held ones on 1024 threads. BWD_V39_SHAPES against float64, and
# exactly these y-held plans: f32 196608 / 262144 on 12 / 16 of 512 threads, 524288 on 16 of 1024; 16-bit 524288 on 16
# of 512, 1000003 on 16 of 1024 (misaligned); more rows than resident clusters at 196608 and 524288 (the inboxes cycle).
# v38's plans in between: f32 327680 16 of 1024 (5 packs), 16-bit 327680 16 of 512 (5 packs), 600001 15 of 1024 (5
# packs); f32 600001 and 1000003 take the stream class.
BWD_V39_SHAPES = [(40, 196608), (12, 262144), (2, 327680), (20, 524288), (3, 600001), (1, 1000003)]
BWD_V39_Y_HELD = {(196608, 12, 512), (262144, 16, 512), (524288, 16, 1024), (524288, 16, 512), (1000003, 16, 1024)}
BWD_V39_V38 = {(327680, 16, 1024), (327680, 16, 512), (600001, 15, 1024)}


@pytest.mark.gpu
@pytest.mark.slow
def test_gpu_bwd_v39_y_held(gpu):
    err = _run_script(_BWD_SCRIPT, BWD_V39_SHAPES, JAX_MEMOPS_SOFTMAX_BWD="v39", JAX_MEMOPS_SOFTMAX_PLAN_LOG="1")
    held, v38 = ({(c, k, t) for k, t, merge, c, _ in _cluster_plans(err, name) if merge == "messages"}
                 for name in ("softmax_bwd v39 y-held", "softmax_bwd v39"))
    assert held == BWD_V39_Y_HELD and v38 == BWD_V39_V38, f"y-held {held}, v38's {v38}\n" + err[-4000:]


# v41 (JAX_MEMOPS_SOFTMAX_BWD=v41, an A/B option; cpp/softmax_bwd.cu bwd_v41_choice): v39, but where CTAs of another
# multiple of 32 threads (128..512) keep at least 4% more rows in flight (resident clusters) than v38's clusters of
# 512 threads, those. BWD_V41_SHAPES against float64 (one row, many rows: the inboxes cycle; misaligned rows; the
# special rows). Every v41 launch merges by messages over k >= 2 CTAs of a multiple of 32 threads in [128, 512]; at
# C = 50257 a launch on CTAs of other than 512 threads appears (the 16-bit rows: a model of the H200 gives 5 CTAs of
# 256 threads, 102 resident clusters against v38's 88), with at least 4% more resident clusters than v38's 16-bit plan
# (3 of 512 threads, logged by the same shapes under JAX_MEMOPS_SOFTMAX_BWD=v38).
BWD_V41_SHAPES = [(20, 8193), (3, 16385), (470, 32768), (1, 50257), (320, 50257), (6, 65536), (40, 131072),
                  (4, 150001)]


def _bwd_plan_logs(*versions):
    """{version: stderr} of _BWD_SCRIPT over BWD_V41_SHAPES with the plan log, one fresh process per
    JAX_MEMOPS_SOFTMAX_BWD value ("" the default)."""
    return {v: _run_script(_BWD_SCRIPT, BWD_V41_SHAPES, JAX_MEMOPS_SOFTMAX_BWD=v, JAX_MEMOPS_SOFTMAX_PLAN_LOG="1")
            for v in versions}


@pytest.mark.gpu
@pytest.mark.slow
def test_gpu_bwd_v41_odd_ctas(gpu):
    logs = _bwd_plan_logs("v38", "v41")
    v41 = _cluster_plans(logs["v41"], "softmax_bwd v41")
    assert v41, "no v41 launch:\n" + logs["v41"][-4000:]
    for k, t, merge, c, n in v41:
        assert k >= 2 and t % 32 == 0 and 128 <= t <= 512 and merge == "messages", (k, t, merge, c, n)
    v38 = _cluster_plans(logs["v38"], "softmax_bwd v38")
    base = [n for k, t, _, c, n in v38 if (k, t, c) == (3, 512, 50257)]
    odd = [n for k, t, _, c, n in v41 if c == 50257 and t != 512]
    assert base and odd and max(odd) >= 1.04 * base[0], f"v38 {v38}, v41 {v41}"


def _plans_by_case(err, name):
    """{(dtype, cols): [(k, threads, merge, clusters), ...]} of the launches the plan log names `name`, each under
    the case _BWD_SCRIPT announced last (a plan logged once for consecutive cases of one shape counts for the first)."""
    out, case = {}, None
    for line in err.splitlines():
        if m := re.match(r"case (\w+) (\d+)$", line):
            case = (m[1], int(m[2]))
        elif case:
            for k, t, merge, c, n in _cluster_plans(line, name):
                assert c == case[1], (line, case)
                out.setdefault(case, []).append((k, t, merge, n))
    return out


# v42, the default (cpp/softmax_bwd.cu bwd_v41_choice's keep_ctas): v41, but only where the odd CTAs' clusters keep at least
# as many CTAs resident (clusters x k) as v38's 512-thread plan. Each v42 launch of BWD_V41_SHAPES (against float64)
# must merge by messages on k >= 2 CTAs; each other than v38's own plan on a multiple of 32 threads in [128, 480], with
# >= 1.04x the resident clusters and >= 1x the resident CTAs of v38's plan for the same dtype and width (the same shapes
# under JAX_MEMOPS_SOFTMAX_BWD=v38); at 16-bit 50257 a launch on other than 512 threads appears; at f32 65536 and 16-bit
# 131072, where v41's 7 x 480 threads lost 4% (RESULTS.md "v41"), none does.
@pytest.mark.gpu
@pytest.mark.slow
def test_gpu_bwd_v42_keeps_ctas(gpu):
    logs = _bwd_plan_logs("v38", "")
    v42 = _plans_by_case(logs[""], "softmax_bwd v42")
    v38 = _plans_by_case(logs["v38"], "softmax_bwd v38")
    auto = _plans_by_case(logs["v38"], "softmax_bwd")  # v38's plans that launch_auto runs (512 threads, 4 packs)
    assert v42, "no v42 launch:\n" + logs[""][-4000:]
    for case, plans in v42.items():
        base = v38.get(case, []) + auto.get(case, [])
        assert len(base) == 1 and base[0][1] == 512, (case, base)
        k0, _, _, n0 = base[0]
        for k, t, merge, n in plans:
            assert merge == "messages" and k >= 2, (case, k, t, merge, n)
            if (k, t, n) != (k0, 512, n0):  # v38's plan kept (named v42), else a cluster of other CTAs
                assert t % 32 == 0 and 128 <= t < 512, (case, k, t, n)
                assert n >= 1.04 * n0 and n * k >= n0 * k0, (case, (k, t, n), base)
    assert any(t != 512 for d, c in v42 if c == 50257 and d != "float32" for _, t, _, _ in v42[d, c]), v42
    assert not {("float32", 65536), ("bfloat16", 131072), ("float16", 131072)} & set(v42), v42


# The bulk-copy planner's ties (cpp/softmax_fwd.cu tie_to_messages): by default the smallest k that merges by
# messages (k >= 4) wins a tie in score over a smaller k, so at C = 50257 every dtype's plan is k = 4 by
# messages; JAX_MEMOPS_SOFTMAX_TIE=small restores the smallest k (f32 k = 2, 16-bit k = 1, by the barrier).
# CLUSTER_SHAPES correct against float64 under both. Under v9's rule (16-bit rows of 50257 take v14's
# two-pass kernel by default).
@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize("tie", ["", "small"])
def test_gpu_fwd_tie_rule(gpu, tie):
    err = _run_fwd_script(CLUSTER_SHAPES, JAX_MEMOPS_SOFTMAX_FWD="v9", JAX_MEMOPS_SOFTMAX_TIE=tie,
                          JAX_MEMOPS_SOFTMAX_PLAN_LOG="1")
    plans = re.findall(r"softmax_fwd plan: (.*?) x \d+ threads rows=\d+ cols=(\d+) k=(\d+) ", err)
    at = [(variant, int(k)) for variant, cols, k in plans if cols == "50257"]
    assert at, "no bulk-copy launch at C = 50257:\n" + err[-4000:]
    if tie == "small":
        assert all(k < 4 and not variant.endswith(", messages") for variant, k in at), at
    else:
        assert all(k == 4 and variant.endswith(", messages") for variant, k in at), at
