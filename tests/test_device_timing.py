"""The bench's device timing (jax_memops/_device_timing.py): busy time from a profiler trace, per batch of calls."""

import json
import time
from types import SimpleNamespace as NS

import jax
import jax.numpy as jnp
import pytest

from jax_memops import _device_timing as dt
from jax_memops import bench, cli


def _event(name, start, dur, **stats):
    return NS(name=name, start_ns=start, duration_ns=dur, stats=list(stats.items()))


def test_busy_ns_is_the_union_of_intervals():
    assert dt.busy_ns([]) == 0
    assert dt.busy_ns([(20, 30), (0, 10), (5, 15)]) == 25  # overlap counted once, unsorted input
    assert dt.busy_ns([(0, 100), (10, 20), (30, 40)]) == 100  # nested
    assert dt.busy_ns([(0, 10), (10, 20)]) == 20  # touching


def test_windows_take_the_work_that_starts_inside_them():
    spans = {(0, 0): (0, 100), (1, 0): (100, 200), (0, 1): (200, 300)}
    work = [(10, 30), (20, 40), (150, 160), (170, 175), (250, 290), (400, 500)]
    ms = dt.per_window_ms(spans, work, iters=2)
    assert ms == pytest.approx({(0, 0): 15e-6, (1, 0): 7.5e-6, (0, 1): 20e-6})


def test_device_planes_are_preferred_and_only_their_streams_count():
    gpu = NS(name="/device:GPU:0", lines=[
        NS(name="Stream #14(Compute)", events=[_event("fusion", 10, 5), _event("memcpy", 20, 3)]),
        NS(name="XLA Ops", events=[_event("fusion", 10, 50)]),  # derived: not device work of its own
    ])
    host = NS(name="/host:CPU", lines=[NS(name="python3", events=[
        _event("thunk", 0, 100, hlo_op="fusion"), _event(f"{dt._WINDOW}:1:2", 5, 40)])])
    assert dt.device_intervals([host, gpu]) == [(10, 15), (20, 23)]
    assert dt.device_intervals([host]) == [(0, 100)]  # a CPU backend: XLA's thunks
    assert dt.windows([host, gpu]) == {(1, 2): (5, 45)}


def test_time_interleaved_rejects_an_unknown_timing():
    with pytest.raises(ValueError, match="timing must be one of"):
        bench.time_interleaved([lambda: jnp.ones(2)], 1, 1, "cycles")


def test_auto_iters_fill_the_timing_window(monkeypatch):
    """iters=None: as many calls as take AUTO_REP_MS, at least one, at most MAX_AUTO_ITERS."""
    monkeypatch.setattr(bench, "AUTO_REP_MS", 10.0)
    slow = bench.auto_iters(lambda: time.sleep(0.002))  # >= 2 ms a call: at most 5 fill 10 ms
    assert 1 <= slow <= 5
    assert bench.auto_iters(lambda: time.sleep(0.02)) == 1
    assert bench.auto_iters(lambda: None) == bench.MAX_AUTO_ITERS  # ~no time a call: the cap
    counted = []
    (ms,) = bench.time_interleaved([lambda: counted.append(time.sleep(0.002))], None, 2)
    # 2 warm-up calls, 3 to probe, then 2 timings of 2-5 calls each (>= 2 ms a call, well under 5 ms)
    assert ms >= 2.0 and 2 + 3 + 2 * 2 <= len(counted) <= 2 + 3 + 2 * 5


def test_no_device_work_is_an_error(monkeypatch):
    monkeypatch.setattr(dt, "device_intervals", lambda planes: [])
    with pytest.raises(RuntimeError, match="no device work"):
        dt.device_times([jax.jit(lambda: jnp.ones(8) * 2)], 1, 1)


def test_device_time_grows_with_the_work(device):
    """Four times the bytes take clearly longer on the device, as the profiler sees it."""
    small = jax.device_put(jnp.ones((1 << 18,), jnp.float32), device)
    big = jax.device_put(jnp.ones((1 << 20 if device.platform == "cpu" else 1 << 24,), jnp.float32), device)
    f = jax.jit(lambda v: jnp.tanh(v) * 3.0)
    calls = [lambda: f(small), lambda: f(big)]
    small_ms, big_ms = bench.time_interleaved(calls, iters=5, reps=3, timing="device")
    assert 0 < small_ms and 1.5 * small_ms < big_ms


def test_device_time_of_a_large_copy_is_at_most_its_wall_time(gpu):
    """A 256 MB copy: the device's busy time leaves out each call's dispatch cost, and little else."""
    x = jax.device_put(jnp.ones((1 << 26,), jnp.float32), gpu)
    copy = bench.copy_of(x)
    (wall,) = bench.time_interleaved([copy], iters=20, reps=5)
    (busy,) = bench.time_interleaved([copy], iters=20, reps=5, timing="device")
    assert 0.5 * wall < busy <= 1.02 * wall


def test_bench_with_device_timing(tmp_path, capsys):
    t0 = time.perf_counter()
    assert cli.main(["bench", "--quick", "--timing", "device", "--parts", "sweep", "fusion", "--ops", "softmax",
                     "--dirs", "fwd", "--dtypes", "float32", "--out", str(tmp_path)]) == 0
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["environment"]["timing_mode"] == "device" and "profiler" in data["environment"]["timing"]
    assert len(data["results"]) == 2 and all(r["ours_ms"] > 0 and r["memcpy_ms"] > 0 for r in data["results"])
    assert data["fusion"][0]["ours_fused_ms"] > 0
    assert "device timing" in capsys.readouterr().out
    assert time.perf_counter() - t0 < 120
