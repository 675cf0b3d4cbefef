"""Handwritten kernels vs XLA's automatic fusion: correctness first, then time, on whatever device JAX has.

Each case is (op, direction, dtype, shape). For each: both sides are jitted, their results compared (a
disagreement fails the run), then timed interleaved: median over repetitions of the mean time of
`iters` back-to-back calls closed by one block_until_ready (device work is queued asynchronously, so
this measures device throughput once a call takes longer than its dispatch).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

import jax_memops as jm

from . import reference

OPS = ("softmax", "layer_norm", "rms_norm", "gelu")
DIRECTIONS = ("fwd", "bwd", "fwd+bwd")
DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16}
# Max |ours - XLA| / max|XLA| allowed per dtype: both compute in float32 and round to the dtype.
TOLERANCE = {"float32": 1e-4, "bfloat16": 2e-2, "float16": 4e-3}


@dataclass(frozen=True)
class Case:
    op: str
    direction: str
    dtype: str
    shape: tuple[int, ...]

    @property
    def label(self) -> str:
        return f"{self.op:10s} {self.direction:7s} {self.dtype:8s} {'x'.join(map(str, self.shape))}"


@dataclass
class Result:
    case: Case
    max_rel_diff: float
    ours_ms: float
    xla_ms: float
    bytes_moved: int
    extra: dict = field(default_factory=dict)

    @property
    def speedup(self) -> float:
        return self.xla_ms / self.ours_ms

    @property
    def ours_gbps(self) -> float:
        return self.bytes_moved / (self.ours_ms * 1e-3) / 1e9


def _functions(op: str) -> tuple[Callable, Callable]:
    """(ours, XLA's) as functions of (x, scale, bias)."""
    if op == "softmax":
        return (lambda x, s, b: jm.softmax(x)), (lambda x, s, b: reference.softmax(x))
    if op == "layer_norm":
        return jm.layer_norm, reference.layer_norm
    if op == "rms_norm":
        return (lambda x, s, b: jm.rms_norm(x, s)), (lambda x, s, b: reference.rms_norm(x, s))
    if op == "gelu":
        return jm.scale_bias_gelu, reference.scale_bias_gelu
    raise ValueError(f"unknown op {op!r}; expected one of {OPS}")


def _tensor_passes(case: Case) -> int:
    """Full-tensor reads + writes the op must make at least: forward x in, y out; backward one saved
    tensor (y or x) and dy in, dx out; a training step both."""
    return {"fwd": 2, "bwd": 3, "fwd+bwd": 5}[case.direction]


def build(case: Case, key) -> tuple[Callable, Callable, tuple]:
    """Jitted (ours, xla) and their arguments for a case."""
    dtype = DTYPES[case.dtype]
    cols = case.shape[-1]
    kx, ks, kb, kd = jax.random.split(key, 4)
    x = (2.0 * jax.random.normal(kx, case.shape, jnp.float32)).astype(dtype)
    scale = 1.0 + 0.1 * jax.random.normal(ks, (cols,), jnp.float32)
    bias = 0.1 * jax.random.normal(kb, (cols,), jnp.float32)
    ours, xla = _functions(case.op)
    if case.direction == "fwd":
        return jax.jit(ours), jax.jit(xla), (x, scale, bias)
    dy = jax.random.normal(kd, case.shape, jnp.float32).astype(dtype)
    if case.direction == "fwd+bwd":
        def step(f):
            def run(x, s, b, dy):
                y, pullback = jax.vjp(f, x, s, b)
                return y, pullback(dy)
            return jax.jit(run)
        return step(ours), step(xla), (x, scale, bias, dy)
    # Backward alone: the pullback of a forward run beforehand, i.e. from the saved residuals.
    pullbacks = [jax.vjp(f, x, scale, bias)[1] for f in (ours, xla)]
    apply = jax.jit(lambda pullback, dy: pullback(dy))
    return ((lambda *a: apply(pullbacks[0], a[-1])), (lambda *a: apply(pullbacks[1], a[-1])),
            (x, scale, bias, dy))


def max_rel_diff(a, b) -> float:
    worst = 0.0
    for u, v in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        u, v = np.asarray(u, np.float64), np.asarray(v, np.float64)
        if u.size == 0:
            continue
        if not (np.isfinite(u).all() and np.isfinite(v).all()):
            return float("inf")
        worst = max(worst, float(np.max(np.abs(u - v)) / max(np.max(np.abs(v)), 1e-30)))
    return worst


def time_interleaved(fns: list[Callable], args: tuple, iters: int, reps: int) -> list[float]:
    """Median ms per call of each function, measured in alternation so drifts hit all alike."""
    for f in fns:  # compile and warm up
        jax.block_until_ready(f(*args))
        jax.block_until_ready(f(*args))
    samples = [[] for _ in fns]
    for _ in range(reps):
        for f, out in zip(fns, samples):
            t0 = time.perf_counter()
            for _ in range(iters):
                r = f(*args)
            jax.block_until_ready(r)
            out.append((time.perf_counter() - t0) * 1e3 / iters)
    return [statistics.median(s) for s in samples]


def run_case(case: Case, key, iters: int, reps: int) -> Result:
    ours, xla, args = build(case, key)
    diff = max_rel_diff(ours(*args), xla(*args))
    if not diff <= TOLERANCE[case.dtype]:
        raise AssertionError(f"{case.label}: ours and XLA disagree, max relative difference {diff:.3g} "
                             f"(allowed {TOLERANCE[case.dtype]:g})")
    ours_ms, xla_ms = time_interleaved([ours, xla], args, iters, reps)
    nbytes = int(np.prod(case.shape)) * jnp.dtype(DTYPES[case.dtype]).itemsize * _tensor_passes(case)
    return Result(case, diff, ours_ms, xla_ms, nbytes)


def quick_cases(platform: str) -> list[Case]:
    """A small sweep: every op and direction, odd and vocabulary-sized rows, every dtype."""
    rows = 4096 if platform == "gpu" else 64
    shapes = [(rows, 1000), (rows // 8, 50257)] if platform == "gpu" else [(rows, 1000), (4, 50257)]
    return [Case(op, d, dt, s) for op in OPS for d in DIRECTIONS for dt in ("float32", "bfloat16")
            for s in shapes]


def default_cases(platform: str) -> list[Case]:
    """Tensors of 2^26 elements (far larger than a GPU's L2) at short, medium and vocabulary-sized rows;
    on a CPU the quick sweep."""
    if platform == "cpu":
        return quick_cases(platform)
    cols = (1024, 4096, 50257)
    return [Case(op, d, dt, ((1 << 26) // c, c)) for op in OPS for d in DIRECTIONS
            for dt in ("float32", "bfloat16") for c in cols]


def table_header() -> str:
    head = (f"{'op':10s} {'dir':7s} {'dtype':8s} {'shape':>12s} {'ours ms':>9s} {'XLA ms':>9s} "
            f"{'speedup':>7s} {'ours GB/s':>9s} {'max rel diff':>12s}")
    return head + "\n" + "-" * len(head)


def table_row(r: Result) -> str:
    c = r.case
    return (f"{c.op:10s} {c.direction:7s} {c.dtype:8s} {'x'.join(map(str, c.shape)):>12s} "
            f"{r.ours_ms:9.4f} {r.xla_ms:9.4f} {r.speedup:7.2f} {r.ours_gbps:9.1f} {r.max_rel_diff:12.2e}")
