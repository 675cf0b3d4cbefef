"""Handwritten kernels vs XLA's automatic fusion: correctness first, then time, on whatever device JAX has.

Each case is (op, direction, dtype, shape[, softmax algorithm]). Ours and XLA's formulation
(`jax_memops.reference`: jax.nn.softmax, a Flax-style LayerNorm, jax.nn.gelu(x*s + b, approximate=True),
all jitted) are first compared — a disagreement stops the run — then timed, interleaved with a jitted
copy of as many bytes as x holds (read + write: the bandwidth ceiling measured in the same run; see copy_of)
and the device's own copy of them (memcpy_of: a check that XLA's copy is not a weak ceiling).

Timing: warm-up calls (compilation excluded), then the median over `reps` repetitions of the mean time of
`iters` back-to-back calls closed by one block_until_ready (on a CPU, by default, as many calls as take
10 ms). Device work is queued asynchronously, so this is device throughput as long as one call outlasts its
dispatch (tens of microseconds): true for the default GPU tensors (2^26 elements, 4x larger than the H200's L2
even in bf16, so no buffer rotation is needed). It needs no profiler, works on any backend and counts what a
user's jitted loop pays, launch gaps included. With timing="device" (`--timing device`) the same calls run
inside a profiler trace and each is charged the device's busy time alone (_device_timing.py): on the H200 a
jitted call costs ~10-19 us beyond its kernels, on both sides, which the wall clock adds to kernels of
~35-150 us.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import asdict, dataclass
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

import jax_memops as jm

from . import reference, unfused
from ._device_timing import device_times

OPS = ("softmax", "layer_norm", "rms_norm", "gelu")
NORMS = ("layer_norm", "rms_norm")  # the ops with an output dtype of their own (`dtype=`)
DIRECTIONS = ("fwd", "bwd", "fwd+bwd", "jvp")
DEFAULT_DIRECTIONS = ("fwd", "bwd", "fwd+bwd")  # jvp (forward-mode AD) on request
DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16}
# Max |ours - XLA| / max|XLA| allowed per dtype: both compute in float32 and round to the dtype.
TOLERANCE = {"float32": 1e-4, "bfloat16": 2e-2, "float16": 4e-3}
# Row lengths of the default GPU grid (../shared/ANCHORS.md), each at 2^26 elements.
DEFAULT_COLS = {
    "softmax": (128, 512, 1024, 2048, 4096, 8192, 32768, 50257, 131072),
    "layer_norm": (768, 1024, 2048, 4096, 8192, 12288),
    "rms_norm": (768, 1024, 4096, 12288),
    "gelu": (768, 4096),
}
DEFAULT_ELEMENTS = 1 << 26
LADDER_COLS = (1024, 50257)
TIMINGS = ("wall", "device")


@dataclass(frozen=True)
class Case:
    op: str
    direction: str
    dtype: str
    shape: tuple[int, ...]
    algorithm: str = "auto"  # softmax only
    out_dtype: str | None = None  # the norms only: y's dtype (their `dtype=`; dy has it too), None: x's

    @property
    def dtypes(self) -> str:
        """x's dtype, or "x->y" in short names where y has another ("bf16->f32")."""
        short = {"float32": "f32", "bfloat16": "bf16", "float16": "f16"}
        return self.dtype if self.out_dtype is None else f"{short[self.dtype]}->{short[self.out_dtype]}"

    @property
    def label(self) -> str:
        alg = f" [{self.algorithm}]" if self.op == "softmax" and self.algorithm != "auto" else ""
        return f"{self.op} {self.direction} {self.dtypes} {'x'.join(map(str, self.shape))}{alg}"

    @property
    def elements(self) -> int:
        return int(np.prod(self.shape))

    @property
    def bytes_moved(self) -> int:
        """The least traffic: forward x in + y out; backward one saved tensor (y or x) and dy in, dx out;
        a training step both; jvp (forward mode, a tangent of x) x and its tangent in, y and the output's
        tangent out (per-row statistics and per-feature parameters are negligible). Passes over x-like tensors
        (x, dx, x's tangent; the softmax's saved y) and over y-like ones (y, dy, y's tangent) by their dtypes."""
        x_passes, y_passes = {"fwd": (1, 1), "bwd": (2, 1), "fwd+bwd": (3, 2), "jvp": (2, 2)}[self.direction]
        sx = jnp.dtype(DTYPES[self.dtype]).itemsize
        sy = sx if self.out_dtype is None else jnp.dtype(DTYPES[self.out_dtype]).itemsize
        return self.elements * (sx * x_passes + sy * y_passes)

    @property
    def tolerance(self) -> float:
        """TOLERANCE of the less precise of x's and y's dtypes."""
        return max(TOLERANCE[self.dtype], TOLERANCE[self.out_dtype or self.dtype])


@dataclass
class Result:
    case: Case
    max_rel_diff: float
    ours_ms: float
    xla_ms: float
    copy_ms: float  # one read + one write of x (XLA's jitted copy)
    memcpy_ms: float  # the same bytes by the device's copy (unfused.copy)

    @property
    def speedup(self) -> float:
        return self.xla_ms / self.ours_ms

    def gbps(self, ms: float) -> float:
        return self.case.bytes_moved / (ms * 1e-3) / 1e9

    @property
    def copy_gbps(self) -> float:
        return 2 * self.case.elements * jnp.dtype(DTYPES[self.case.dtype]).itemsize / (self.copy_ms * 1e-3) / 1e9

    @property
    def pct_of_copy(self) -> float:
        return 100.0 * self.gbps(self.ours_ms) / self.copy_gbps

    @property
    def memcpy_gbps(self) -> float:
        return self.copy_gbps * self.copy_ms / self.memcpy_ms

    @property
    def pct_of_memcpy(self) -> float:
        return 100.0 * self.gbps(self.ours_ms) / self.memcpy_gbps

    def to_dict(self) -> dict:
        d = asdict(self.case)
        d["shape"] = list(self.case.shape)
        d.update(max_rel_diff=self.max_rel_diff, ours_ms=self.ours_ms, xla_ms=self.xla_ms,
                 copy_ms=self.copy_ms, memcpy_ms=self.memcpy_ms, speedup=self.speedup,
                 bytes_moved=self.case.bytes_moved, ours_gbps=self.gbps(self.ours_ms), xla_gbps=self.gbps(self.xla_ms),
                 copy_gbps=self.copy_gbps, pct_of_copy=self.pct_of_copy, memcpy_gbps=self.memcpy_gbps,
                 pct_of_memcpy=self.pct_of_memcpy)
        return d


def _functions(op: str, algorithm: str = "auto", out_dtype: str | None = None) -> tuple[Callable, Callable]:
    """(ours, XLA's) as functions of (x, scale, bias). A norm's out_dtype: ours with `dtype=`, XLA's on x converted
    to float32 (exact; XLA fuses the conversion into its normalization) and rounded into out_dtype."""
    if out_dtype is not None:
        if op not in NORMS:
            raise ValueError(f"out_dtype is for {NORMS} only, got op {op!r}")
        out = DTYPES[out_dtype]
        wide = lambda x: x.astype(jnp.float32)  # noqa: E731
        if op == "layer_norm":
            return ((lambda x, s, b: jm.layer_norm(x, s, b, dtype=out)),
                    (lambda x, s, b: reference.layer_norm(wide(x), s, b).astype(out)))
        return ((lambda x, s, b: jm.rms_norm(x, s, dtype=out)),
                (lambda x, s, b: reference.rms_norm(wide(x), s).astype(out)))
    if op == "softmax":
        return (lambda x, s, b: jm.softmax(x, algorithm=algorithm)), (lambda x, s, b: reference.softmax(x))
    if op == "layer_norm":
        return jm.layer_norm, reference.layer_norm
    if op == "rms_norm":
        return (lambda x, s, b: jm.rms_norm(x, s)), (lambda x, s, b: reference.rms_norm(x, s))
    if op == "gelu":
        return jm.scale_bias_gelu, reference.scale_bias_gelu
    raise ValueError(f"unknown op {op!r}; expected one of {OPS}")


def build(case: Case, key) -> tuple[Callable, Callable, tuple]:
    """Jitted (ours, xla) for a case and the arguments both take: (x, scale, bias, dy)."""
    dtype = DTYPES[case.dtype]
    cols = case.shape[-1]
    kx, ks, kb, kd = jax.random.split(key, 4)
    x = (2.0 * jax.random.normal(kx, case.shape, jnp.float32)).astype(dtype)
    scale = 1.0 + 0.1 * jax.random.normal(ks, (cols,), jnp.float32)
    bias = 0.1 * jax.random.normal(kb, (cols,), jnp.float32)
    dy = jax.random.normal(kd, case.shape, jnp.float32).astype(DTYPES[case.out_dtype or case.dtype])
    args = (x, scale, bias, dy)
    ours, xla = _functions(case.op, case.algorithm, case.out_dtype)
    if case.direction == "fwd":
        return [jax.jit(lambda x, s, b, dy, f=f: f(x, s, b)) for f in (ours, xla)] + [args]
    if case.direction == "jvp":  # dy serves as the tangent of x; scale and bias are held fixed
        def tangent(f):
            return jax.jit(lambda x, s, b, dy: jax.jvp(lambda v: f(v, s, b), (x,), (dy,)))
        return [tangent(ours), tangent(xla), args]
    if case.direction == "fwd+bwd":
        def step(f):
            def run(x, s, b, dy):
                y, pullback = jax.vjp(f, x, s, b)
                return y, pullback(dy)
            return jax.jit(run)
        return [step(ours), step(xla), args]
    # Backward alone: the pullback of a forward run beforehand, i.e. from the saved residuals.
    apply = jax.jit(lambda pullback, dy: pullback(dy))
    pullbacks = [jax.vjp(f, x, scale, bias)[1] for f in (ours, xla)]
    return [(lambda x, s, b, dy, p=p: apply(p, dy)) for p in pullbacks] + [args]


@jax.jit
def _xor_words(words):
    return words ^ jnp.uint32(1)


def _copy_words(x) -> int:
    """4-byte words in the copies' buffers: x's bytes cut to a multiple of 16 (at least 16 bytes)."""
    return max(4, x.size * x.dtype.itemsize // 16 * 4)


def copy_of(x) -> Callable[[], object]:
    """The ceiling, as a zero-argument call: one read and one write of as many bytes as x holds (cut to a
    multiple of 16, at most 15 fewer) that XLA cannot elide — an XOR over a uint32 buffer of that size on
    x's device. Not x itself: XLA's elementwise loop on some shapes is not vectorized (measured on the
    H200: `x * 1.0001` on (1335, 50257) f32 1.6 TB/s, also on x flattened — an odd element count; its
    bf16 prefix cut to 16 bytes and bitcast to words 1.7 TB/s; `x * 1.0001` in bf16 ~3.4 TB/s where a
    copy of the same bytes reaches ~3.9), and a slow ceiling would flatter every ratio to it."""
    buf = jax.device_put(jnp.zeros((_copy_words(x),), jnp.uint32), next(iter(x.devices())))
    return lambda: _xor_words(buf)


@jax.jit
def _memcpy(buf):
    return unfused.copy(buf)


def memcpy_of(x) -> Callable[[], object]:
    """The device's own copy as a zero-argument call: the bytes copy_of moves (as float32 words), by one custom call
    to the driver's device-to-device copy (unfused.copy); "% of copy" counts against XLA's copy, "% of memcpy"
    against this. On the H200 the two read alike here (3.2-3.9 TB/s in a jitted loop, each call ~10-19 us above its
    kernel), while the driver's copy timed on the device alone reads 4.17-4.20 (benchmarks/copy_ceiling.cu)."""
    buf = jax.device_put(jnp.zeros((_copy_words(x),), jnp.float32), next(iter(x.devices())))
    return lambda: _memcpy(buf)


def max_rel_diff(a, b) -> float:
    """max |a - b| / max |b| over all leaves; inf if either holds a NaN or inf. Computed where the arrays
    live, in float32 (the tolerances are >= 1e-4), so checking a 2^26-element case costs milliseconds."""
    worst = 0.0
    for u, v in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        if np.size(u) == 0:
            continue
        err, finite = _rel_diff(jnp.asarray(u), jnp.asarray(v))
        if not bool(finite):
            return float("inf")
        worst = max(worst, float(err))
    return worst


@jax.jit
def _rel_diff(u, v):
    u, v = u.astype(jnp.float32), v.astype(jnp.float32)
    finite = jnp.isfinite(u).all() & jnp.isfinite(v).all()
    return jnp.max(jnp.abs(u - v)) / jnp.maximum(jnp.max(jnp.abs(v)), 1e-30), finite


AUTO_REP_MS = 10.0  # with iters=None each timing lasts at least this long (capped at MAX_AUTO_ITERS calls)
MAX_AUTO_ITERS = 1000


def auto_iters(call: Callable[[], object]) -> int:
    """Back-to-back calls of `call` (warm) that take about AUTO_REP_MS: enough that a timing of small tensors
    is not one scheduler tick (on a CPU, two `--quick` runs timing 3 calls of ~0.1 ms 3 times differed by a
    median 16% per case; with 10 ms timings, 6%)."""
    t0 = time.perf_counter()
    for _ in range(3):
        r = call()
    jax.block_until_ready(r)
    per_call_ms = (time.perf_counter() - t0) * 1e3 / 3
    return min(MAX_AUTO_ITERS, max(1, math.ceil(AUTO_REP_MS / max(per_call_ms, 1e-6))))


def time_interleaved(calls: list[Callable[[], object]], iters: int | None, reps: int,
                     timing: str = "wall") -> list[float]:
    """Median ms per call of each zero-argument call, measured in alternation so drifts hit all alike; by the
    wall clock, or with timing="device" the device's busy time per call from a profiler trace
    (_device_timing.py: without what each call costs beyond its kernels). Each timing is the mean of `iters`
    back-to-back calls; iters=None picks, per call, as many as take AUTO_REP_MS."""
    if timing not in TIMINGS:
        raise ValueError(f"timing must be one of {TIMINGS}, got {timing!r}")
    for f in calls:  # compile and warm up
        jax.block_until_ready(f())
        jax.block_until_ready(f())
    counts = [auto_iters(f) if iters is None else iters for f in calls]
    if timing == "device":
        return device_times(calls, max(counts), reps)
    samples = [[] for _ in calls]
    for _ in range(reps):
        for f, n, out in zip(calls, counts, samples):
            t0 = time.perf_counter()
            for _ in range(n):
                r = f()
            jax.block_until_ready(r)
            out.append((time.perf_counter() - t0) * 1e3 / n)
    return [statistics.median(s) for s in samples]


def run_case(case: Case, key, iters: int | None, reps: int, timing: str = "wall") -> Result:
    ours, xla, args = build(case, key)
    diff = max_rel_diff(ours(*args), xla(*args))
    if not diff <= case.tolerance:
        raise AssertionError(f"{case.label}: ours and XLA disagree, max relative difference {diff:.3g} "
                             f"(allowed {case.tolerance:g})")
    x = args[0]
    ours_ms, xla_ms, copy_ms, memcpy_ms = time_interleaved(
        [lambda: ours(*args), lambda: xla(*args), copy_of(x), memcpy_of(x)], iters, reps, timing)
    return Result(case, diff, ours_ms, xla_ms, copy_ms, memcpy_ms)


# -- sweeps --------------------------------------------------------------------------------------------
def grid(ops, directions, dtypes, cols_by_op, elements) -> list[Case]:
    """rows = elements // C for every C of each op (at least one row)."""
    return [Case(op, d, dt, (max(1, elements // c), c)) for op in ops for c in cols_by_op[op]
            for d in directions for dt in dtypes]


def with_out_dtypes(cases: list[Case], out_dtypes) -> list[Case]:
    """Each norm case followed by the same case with y in each of `out_dtypes` that differs from x's dtype (a
    bfloat16 x normalized into float32: Flax's output where the params are float32)."""
    return [c2 for c in cases for c2 in [c] + ([Case(c.op, c.direction, c.dtype, c.shape, c.algorithm, o)
                                                for o in out_dtypes if o != c.dtype] if c.op in NORMS else [])]


def quick_cases(ops=OPS, directions=DEFAULT_DIRECTIONS, dtypes=("float32", "bfloat16")) -> list[Case]:
    """Seconds on a CPU: a short odd row and a vocabulary-sized row per op."""
    return [Case(op, d, dt, s) for op in ops for s in ((64, 1000), (4, 50257))
            for d in directions for dt in dtypes]


def ladder_cases(elements: int, cols=LADDER_COLS) -> list[Case]:
    """The seed's story: every softmax algorithm, forward, f32, at a short and a vocabulary-sized row."""
    return [Case("softmax", "fwd", "float32", (max(1, elements // c), c), alg)
            for c in cols for alg in jm.SOFTMAX_ALGORITHMS]


# -- the fusion experiment -----------------------------------------------------------------------------
FUSION_SCALE, FUSION_BIAS = 1.5, 0.25
FUSION_ELEMENTS = (1 << 25, 1 << 28)  # the seeds' n, and one far past any cache


def fusion_case(n: int, dtype: str, key, iters: int | None, reps: int, timing: str = "wall") -> dict:
    """gelu(x * 1.5 + 0.25) four ways: our fused kernel, our three kernels (three custom calls), XLA's
    fused jit, and XLA as three separately jitted calls; with the copy of x as the ceiling."""
    from . import unfused

    s, b = FUSION_SCALE, FUSION_BIAS
    x = (2.0 * jax.random.normal(key, (n,), jnp.float32)).astype(DTYPES[dtype])
    xla_pieces = [jax.jit(lambda v: v * jnp.asarray(s, v.dtype)), jax.jit(lambda v: v + jnp.asarray(b, v.dtype)),
                  jax.jit(lambda v: reference.gelu(v))]
    ways = {
        "ours_fused": jax.jit(lambda v: jm.scale_bias_gelu(v, s, b)),
        "ours_3_kernels": jax.jit(lambda v: unfused.three_kernels(v, s, b)),
        "xla_fused": jax.jit(lambda v: reference.scale_bias_gelu(v, s, b)),
        "xla_3_jits": lambda v: xla_pieces[2](xla_pieces[1](xla_pieces[0](v))),
    }
    want = ways["xla_fused"](x)
    for name, f in ways.items():  # the chains round twice more in 16-bit dtypes: 2x the tolerance
        diff = max_rel_diff(f(x), want)
        if not diff <= 2 * TOLERANCE[dtype]:
            raise AssertionError(f"fusion {name} {dtype} n={n}: disagrees with XLA by {diff:.3g}")
    times = time_interleaved([lambda f=f: f(x) for f in ways.values()] + [copy_of(x)], iters, reps, timing)
    out = {"n": n, "dtype": dtype, **{f"{k}_ms": t for k, t in zip(ways, times)}, "copy_ms": times[-1]}
    out["fused_vs_3_kernels"] = out["ours_3_kernels_ms"] / out["ours_fused_ms"]
    out["fused_vs_xla_fused"] = out["xla_fused_ms"] / out["ours_fused_ms"]
    out["fused_pct_of_copy"] = 100.0 * out["copy_ms"] / out["ours_fused_ms"]
    return out


def fusion_table(rows: list[dict]) -> str:
    head = (f"{'n':>10s} {'dtype':8s} {'fused':>8s} {'3 kernels':>9s} {'XLA fused':>9s} {'XLA 3 jits':>10s} "
            f"{'copy':>8s} {'3k/fused':>8s} {'XLA/fused':>9s} {'% copy':>6s}   (ms)")
    lines = [head]
    for r in rows:
        lines.append(f"{r['n']:>10d} {r['dtype']:8s} {r['ours_fused_ms']:8.3f} {r['ours_3_kernels_ms']:9.3f} "
                     f"{r['xla_fused_ms']:9.3f} {r['xla_3_jits_ms']:10.3f} {r['copy_ms']:8.3f} "
                     f"{r['fused_vs_3_kernels']:8.2f} {r['fused_vs_xla_fused']:9.2f} {r['fused_pct_of_copy']:6.0f}")
    return "\n".join(lines)
