"""Device time of jitted calls, read from JAX's profiler: how long the device itself worked on them.

The bench's default timing (wall clock over back-to-back calls) also counts what each call costs beyond its
kernels — on the H200 ~10-19 us per jitted call, on both sides, which pulls every ratio toward 1.0 for the
~35-150 us kernels of the default grid. Here the calls run inside one profiler trace; each batch of `iters`
calls sits in its own host annotation closed by a block_until_ready, so the device activity (kernels, copies,
memsets) that starts inside the annotation is that batch's. A batch's time is the union of those intervals:
the time the device was busy with it, gaps between kernels (within a call or between calls) excluded. On a
GPU the activity comes from CUPTI (the planes "/device:GPU:N", their "Stream" lines); on a CPU, where XLA's
host is the device, from the spans of XLA's thunks (host events carrying an `hlo_op`; there the profiler's own
cost lands inside them, so CPU figures read above the wall clock's).
"""

from __future__ import annotations

import glob
import os
import statistics
import tempfile
from typing import Callable, Iterable

import jax

_WINDOW = "jax_memops.timing"


def busy_ns(intervals: Iterable[tuple[float, float]]) -> float:
    """Length of the union of [start, end) intervals."""
    total, reach = 0.0, float("-inf")
    for start, end in sorted(intervals):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


def device_intervals(planes) -> list[tuple[float, float]]:
    """(start, end) in ns of the device's work in a trace's planes: the stream lines of every device plane;
    where there is none (JAX on a CPU), the host's XLA thunks."""
    out = []
    for plane in planes:
        if plane.name.startswith("/device:"):
            for line in plane.lines:
                if line.name.startswith("Stream"):
                    out += [(e.start_ns, e.start_ns + e.duration_ns) for e in line.events]
    if out:
        return out
    for plane in planes:
        if plane.name.startswith("/host:"):
            for line in plane.lines:
                out += [(e.start_ns, e.start_ns + e.duration_ns) for e in line.events
                        if any(k == "hlo_op" for k, _ in e.stats)]
    return out


def windows(planes) -> dict[tuple[int, int], tuple[float, float]]:
    """{(call, repetition): (start, end)} of the annotations device_times wraps each batch in."""
    out = {}
    for plane in planes:
        if plane.name.startswith("/host:"):
            for line in plane.lines:
                for e in line.events:
                    if e.name.startswith(_WINDOW + ":"):
                        call, rep = map(int, e.name.split(":")[1:])
                        out[call, rep] = (e.start_ns, e.start_ns + e.duration_ns)
    return out


def per_window_ms(spans: dict, intervals: list[tuple[float, float]], iters: int) -> dict:
    """Each window's busy time per call, in ms, from the device intervals that start inside it."""
    return {key: busy_ns(iv for iv in intervals if a <= iv[0] < b) / iters * 1e-6 for key, (a, b) in spans.items()}


def device_times(calls: list[Callable[[], object]], iters: int, reps: int) -> list[float]:
    """Median over `reps` of the device's busy time per call (ms) of each zero-argument call, the calls
    alternating in one trace. Raises RuntimeError if the profiler saw no device work for some batch (e.g. a
    GPU whose CUPTI library is missing)."""
    from jax.profiler import ProfileData

    with tempfile.TemporaryDirectory() as tmp:
        jax.profiler.start_trace(tmp)
        try:
            for rep in range(reps):
                for i, f in enumerate(calls):
                    with jax.profiler.TraceAnnotation(f"{_WINDOW}:{i}:{rep}"):
                        for _ in range(iters):
                            r = f()
                        jax.block_until_ready(r)
        finally:
            jax.profiler.stop_trace()
        paths = glob.glob(os.path.join(tmp, "**", "*.xplane.pb"), recursive=True)
        if len(paths) != 1:
            raise RuntimeError(f"device timing: expected one profile in {tmp}, found {len(paths)}")
        planes = list(ProfileData.from_file(paths[0]).planes)
    spans = windows(planes)
    if len(spans) != len(calls) * reps:
        raise RuntimeError(f"device timing: found {len(spans)} of {len(calls) * reps} timing windows in the trace")
    ms = per_window_ms(spans, device_intervals(planes), iters)
    empty = sorted({i for (i, _), t in ms.items() if t <= 0})
    if empty:
        raise RuntimeError(f"device timing: the profiler recorded no device work for call(s) {empty} "
                           f"(on a GPU it needs CUPTI); use wall-clock timing")
    return [statistics.median(ms[i, rep] for rep in range(reps)) for i in range(len(calls))]
