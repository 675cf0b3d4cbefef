"""The `jax-memops` command: info, and bench --quick (checks each op against XLA, then times it beside
XLA and a copy, and writes the table, the JSON and the plots)."""

import json

import jax
import jax.numpy as jnp
import pytest

import jax_memops as jm
from jax_memops import bench, cli


def test_info(capsys):
    assert cli.main(["info"]) == 0
    out = capsys.readouterr().out
    assert "CUDA kernels compiled:" in out and jax.__version__ in out
    assert f"CPU handlers: the {jm.build_info()['cpu_isa']} build" in out


def test_bench_quick_writes_table_json_and_plots(tmp_path, capsys):
    rc = cli.main(["bench", "--quick", "--ops", "softmax", "layer_norm", "--dtypes", "bfloat16",
                   "--out", str(tmp_path)])
    assert rc == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith(("softmax", "layer_norm"))]
    sweep = 2 * 3 * 2  # ops x directions x quick shapes
    ladder = len(bench.LADDER_COLS) * len(jm.SOFTMAX_ALGORITHMS)
    assert len(rows) == sweep + ladder
    assert "GPT-2-style block" in out
    data = json.loads((tmp_path / "results.json").read_text())
    env = data["environment"]
    assert env["jax"] == jax.__version__ and env["jax_memops"]["version"] and "timing" in env
    assert len(data["results"]) == sweep + ladder
    for r in data["results"]:
        assert r["ours_ms"] > 0 and r["xla_ms"] > 0 and r["copy_ms"] > 0
        assert r["max_rel_diff"] <= bench.TOLERANCE[r["dtype"]]
        assert r["pct_of_copy"] == pytest.approx(100 * r["ours_gbps"] / r["copy_gbps"])
        assert r["memcpy_ms"] > 0 and r["pct_of_memcpy"] == pytest.approx(100 * r["ours_gbps"] / r["memcpy_gbps"])
        assert r["memcpy_gbps"] * r["memcpy_ms"] == pytest.approx(r["copy_gbps"] * r["copy_ms"])  # the same bytes
    assert data["model"]["jm_ms"] > 0 and data["model"]["xla_ms"] > 0
    assert [m["config"]["width"] for m in data["mlp"]] == [32] and data["mlp"][0]["jm_ms"] > 0
    assert "MLP block (Dense -> bias+GELU -> Dense)" in out
    assert [f["dtype"] for f in data["fusion"]] == ["bfloat16"]
    assert all(data["fusion"][0][f"{k}_ms"] > 0 for k in ("ours_fused", "ours_3_kernels", "xla_fused",
                                                          "xla_3_jits", "copy"))
    assert "fused kernel vs three kernels" in out
    md = (tmp_path / "results.md").read_text()
    assert md.count("\n") == 2 + sweep + ladder
    pytest.importorskip("matplotlib")
    for name in ("bandwidth_softmax.png", "bandwidth_layer_norm.png", "softmax_ladder.png"):
        png = tmp_path / name
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000, name


def test_softmax_ladder_only(tmp_path, capsys):
    assert cli.main(["bench", "--quick", "--softmax-ladder", "--out", str(tmp_path)]) == 0
    data = json.loads((tmp_path / "results.json").read_text())
    assert {r["algorithm"] for r in data["results"]} == set(jm.SOFTMAX_ALGORITHMS)
    assert data["model"] is None and data["fusion"] == [] and data["mlp"] == []


def test_fusion_only(tmp_path, capsys):
    assert cli.main(["bench", "--quick", "--fusion", "--dtypes", "float32", "--out", str(tmp_path)]) == 0
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["results"] == [] and data["model"] is None and len(data["fusion"]) == 1
    row = data["fusion"][0]
    assert row["fused_vs_3_kernels"] == pytest.approx(row["ours_3_kernels_ms"] / row["ours_fused_ms"])


def test_bench_fails_loudly_on_disagreement(monkeypatch):
    """A kernel that disagrees with XLA must stop the run, not be timed."""
    ours, xla = bench._functions("softmax")
    monkeypatch.setattr(bench, "_functions",
                        lambda op, alg="auto", out=None: ((lambda x, s, b: ours(x, s, b) * 1.01), xla))
    case = bench.Case("softmax", "fwd", "float32", (8, 33))
    with pytest.raises(AssertionError, match="disagree"):
        bench.run_case(case, jax.random.key(0), iters=1, reps=1)


def test_bytes_moved_counts_passes():
    case = bench.Case("layer_norm", "fwd+bwd", "bfloat16", (4, 8))
    assert case.bytes_moved == 4 * 8 * 2 * 5
    assert bench.Case("softmax", "jvp", "float32", (4, 8)).bytes_moved == 4 * 8 * 4 * 4


def test_bytes_moved_with_an_output_dtype():
    """A bf16 x into f32 y: x-like passes (x, dx) at 2 bytes, y-like ones (y, dy) at 4."""
    e = 4 * 8
    for direction, want in (("fwd", 2 + 4), ("bwd", 2 * 2 + 4), ("fwd+bwd", 3 * 2 + 2 * 4), ("jvp", 2 * 2 + 2 * 4)):
        assert bench.Case("rms_norm", direction, "bfloat16", (4, 8), out_dtype="float32").bytes_moved == e * want
    assert bench.Case("layer_norm", "fwd", "float32", (4, 8), out_dtype="bfloat16").tolerance == bench.TOLERANCE[
        "bfloat16"]


def test_bench_output_dtypes(tmp_path):
    """--out-dtypes: each norm case again with y in those dtypes (where they differ from x's), checked against XLA's
    normalization of x in float32 rounded into y's dtype; softmax and GELU cases unchanged."""
    assert cli.main(["bench", "--quick", "--parts", "sweep", "--dirs", "fwd", "fwd+bwd", "--ops", "softmax",
                     "rms_norm", "layer_norm", "--dtypes", "bfloat16", "float32", "--out-dtypes", "float32",
                     "--cols", "96", "--out", str(tmp_path)]) == 0
    rows = json.loads((tmp_path / "results.json").read_text())["results"]
    mixed = [(r["op"], r["direction"], r["dtype"]) for r in rows if r["out_dtype"] is not None]
    assert sorted(mixed) == sorted((op, d, "bfloat16") for op in ("layer_norm", "rms_norm") for d in ("fwd", "fwd+bwd"))
    assert all(r["out_dtype"] in (None, "float32") for r in rows) and len(rows) == 3 * 2 * 2 + 4
    assert "bf16->f32" in (tmp_path / "results.md").read_text()
    with pytest.raises(ValueError, match="out_dtype is for"):
        bench._functions("softmax", "auto", "float32")


def test_bench_jvp_direction(tmp_path):
    """Forward mode on request: y and its tangent, checked against XLA's jax.jvp, then timed."""
    assert cli.main(["bench", "--quick", "--parts", "sweep", "--dirs", "jvp", "--ops", "softmax", "layer_norm",
                     "--dtypes", "float32", "--out", str(tmp_path)]) == 0
    rows = json.loads((tmp_path / "results.json").read_text())["results"]
    assert rows and {r["direction"] for r in rows} == {"jvp"} and {r["op"] for r in rows} == {"softmax", "layer_norm"}
    assert all(r["bytes_moved"] == 4 * 4 * r["shape"][0] * r["shape"][1] for r in rows)


def test_max_rel_diff_sees_nan():
    assert bench.max_rel_diff(jnp.array([1.0, jnp.nan]), jnp.array([1.0, 2.0])) == float("inf")


def test_bench_rejects_unknown_op():
    with pytest.raises(SystemExit):
        cli.main(["bench", "--ops", "matmul"])


@pytest.mark.parametrize("shape,dtype", [((1335, 7), jnp.float32), ((3, 50257), jnp.bfloat16), ((2,), jnp.float16)])
def test_copy_ceiling_moves_the_bytes_of_x(shape, dtype):
    """The copy ceiling reads and writes as many bytes as x holds (cut to a multiple of 16), on its device."""
    x = jnp.ones(shape, dtype)
    out = bench.copy_of(x)()
    assert out.dtype == jnp.uint32 and out.devices() == x.devices()
    assert out.size == max(4, x.size * x.dtype.itemsize // 16 * 4)
    assert 0 <= x.size * x.dtype.itemsize - 4 * out.size < 16 or out.size == 4


@pytest.mark.parametrize("shape,dtype", [((1335, 7), jnp.float32), ((3, 50257), jnp.bfloat16), ((2,), jnp.float16)])
def test_memcpy_ceiling_moves_the_bytes_of_copy_of(shape, dtype):
    """The device's copy moves the bytes copy_of moves (as float32 words), on x's device, by one custom call."""
    x = jnp.ones(shape, dtype)
    out = bench.memcpy_of(x)()
    assert out.dtype == jnp.float32 and out.devices() == x.devices()
    assert out.size == bench.copy_of(x)().size
