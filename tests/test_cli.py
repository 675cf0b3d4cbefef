"""The `jax-memops` command: info, and bench --quick (checks each op against XLA, then times both)."""

import json

import jax
import jax.numpy as jnp
import pytest

from jax_memops import bench, cli


def test_info(capsys):
    assert cli.main(["info"]) == 0
    out = capsys.readouterr().out
    assert "CUDA kernels compiled:" in out and jax.__version__ in out


def test_bench_quick_table_and_json(tmp_path, capsys):
    path = tmp_path / "bench.json"
    rc = cli.main(["bench", "--quick", "--ops", "softmax", "gelu", "--dirs", "fwd", "bwd",
                   "--dtypes", "bfloat16", "--json", str(path)])
    assert rc == 0
    lines = capsys.readouterr().out.splitlines()
    rows = [line for line in lines if line.startswith(("softmax", "gelu"))]
    assert len(rows) == 8  # 2 ops x 2 directions x 2 shapes
    data = json.loads(path.read_text())
    assert data["info"]["jax_memops"]["version"]
    assert len(data["results"]) == 8
    for r in data["results"]:
        assert r["ours_ms"] > 0 and r["xla_ms"] > 0
        assert r["max_rel_diff"] <= bench.TOLERANCE["bfloat16"]


def test_bench_fails_loudly_on_disagreement(monkeypatch):
    """A kernel that disagrees with XLA must stop the run, not be timed."""
    ours, xla = bench._functions("softmax")
    monkeypatch.setattr(bench, "_functions", lambda op: ((lambda x, s, b: ours(x, s, b) * 1.01), xla))
    case = bench.Case("softmax", "fwd", "float32", (8, 33))
    with pytest.raises(AssertionError, match="disagree"):
        bench.run_case(case, jax.random.key(0), iters=1, reps=1)


def test_max_rel_diff_sees_nan():
    assert bench.max_rel_diff(jnp.array([1.0, jnp.nan]), jnp.array([1.0, 2.0])) == float("inf")


def test_bench_rejects_unknown_op():
    with pytest.raises(SystemExit):
        cli.main(["bench", "--ops", "matmul"])
