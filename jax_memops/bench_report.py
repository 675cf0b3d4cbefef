"""What `jax-memops bench` writes: a text table, a Markdown table, a JSON of every number with the
device, versions and commit, and PNG plots (bandwidth vs row length per op; the softmax ladder)."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

import jax
import jaxlib

from ._ext import build_info
from .bench import DIRECTIONS, Result

COLUMNS = ("op", "dir", "dtype", "shape", "ours ms", "XLA ms", "speedup", "ours GB/s", "% of copy",
           "copy GB/s", "% of memcpy", "memcpy GB/s", "max rel diff")


def _gb(v: float) -> str:
    return f"{v:.0f}" if v >= 100 else f"{v:.1f}"


def _cells(r: Result) -> tuple[str, ...]:
    c = r.case
    op = c.op if c.algorithm == "auto" else f"{c.op}[{c.algorithm}]"
    return (op, c.direction, c.dtypes, "x".join(map(str, c.shape)), f"{r.ours_ms:.4f}", f"{r.xla_ms:.4f}",
            f"{r.speedup:.2f}", _gb(r.gbps(r.ours_ms)), f"{r.pct_of_copy:.0f}", _gb(r.copy_gbps),
            f"{r.pct_of_memcpy:.0f}", _gb(r.memcpy_gbps), f"{r.max_rel_diff:.1e}")


_WIDTHS = (20, 7, 9, 12, 9, 9, 7, 9, 9, 9, 11, 11, 12)


def table_header() -> str:
    head = " ".join(f"{h:>{w}s}" if i > 3 else f"{h:<{w}s}" for i, (h, w) in enumerate(zip(COLUMNS, _WIDTHS)))
    return head + "\n" + "-" * len(head)


def table_row(r: Result) -> str:
    return " ".join(f"{v:>{w}s}" if i > 3 else f"{v:<{w}s}" for i, (v, w) in enumerate(zip(_cells(r), _WIDTHS)))


def markdown_table(results: list[Result]) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(_cells(r)) + " |" for r in results]
    return "\n".join(lines)


def _commit() -> str | None:
    """The git commit of the source tree this package was installed from, when it is a checkout.
    JAX_MEMOPS_COMMIT overrides it (a copied tree whose .git lags its files, as on a remote GPU machine)."""
    if os.environ.get("JAX_MEMOPS_COMMIT"):
        return os.environ["JAX_MEMOPS_COMMIT"]
    here = os.path.dirname(os.path.abspath(__file__))
    for path in (os.getcwd(), here):
        try:
            out = subprocess.run(["git", "-C", path, "rev-parse", "--short", "HEAD"], capture_output=True,
                                 text=True, timeout=5)
        except (OSError, subprocess.SubprocessError):
            return None
        if out.returncode == 0:
            return out.stdout.strip()
    return None


TIMING_NOTES = {
    "wall": "median over repetitions of the mean of back-to-back jitted calls closed by one block_until_ready",
    "device": "median over repetitions of the device's busy time per call in a profiler trace of back-to-back "
              "jitted calls (kernels, copies, memsets; gaps between them excluded)",
}


def environment(timing: str = "wall") -> dict:
    dev = jax.devices()[0]
    return {
        "device": f"{dev.platform}: {dev.device_kind}",
        "backend": jax.default_backend(),
        "jax": jax.__version__,
        "jaxlib": jaxlib.__version__,
        "python": platform.python_version(),
        "jax_memops": build_info(),
        "commit": _commit(),
        "argv": sys.argv,
        "timing_mode": timing,
        "timing": TIMING_NOTES[timing] + "; copy = jitted XOR of a uint32 buffer of x's size (read + write), "
                  "memcpy = the device's copy of those bytes (one custom call: cudaMemcpyAsync / memcpy), both "
                  "interleaved",
    }


def write_json(path: str, results: list[Result], extra: dict | None = None, timing: str = "wall") -> None:
    data = {"environment": environment(timing), "results": [r.to_dict() for r in results]}
    data.update(extra or {})
    with open(path, "w") as f:
        json.dump(data, f, indent=1)


def _pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def plot_bandwidth(results: list[Result], out_dir: str) -> list[str]:
    """One PNG per op: GB/s against row length C, ours / XLA / copy / memcpy, a panel per direction."""
    plt = _pyplot()
    if plt is None:
        return []
    paths = []
    device = environment()["device"]
    for op in sorted({r.case.op for r in results}):
        rs = [r for r in results if r.case.op == op and r.case.algorithm == "auto" and r.case.out_dtype is None]
        dirs = [d for d in DIRECTIONS if any(r.case.direction == d for r in rs)]
        if not dirs:
            continue
        fig, axes = plt.subplots(1, len(dirs), figsize=(5 * len(dirs), 4), squeeze=False)
        for ax, d in zip(axes[0], dirs):
            for dtype, style in (("float32", "-"), ("bfloat16", "--"), ("float16", ":")):
                sel = sorted((r for r in rs if r.case.direction == d and r.case.dtype == dtype),
                             key=lambda r: r.case.shape[-1])
                if not sel:
                    continue
                cols = [r.case.shape[-1] for r in sel]
                ax.plot(cols, [r.gbps(r.ours_ms) for r in sel], "o" + style, color="C0", label=f"ours {dtype}")
                ax.plot(cols, [r.gbps(r.xla_ms) for r in sel], "s" + style, color="C1", label=f"XLA {dtype}")
                ax.plot(cols, [r.copy_gbps for r in sel], style, color="0.5", label=f"copy {dtype}")
                ax.plot(cols, [r.memcpy_gbps for r in sel], style, color="0.8", label=f"memcpy {dtype}")
            ax.set_xscale("log", base=2)
            ax.set_xlabel("row length C")
            ax.set_ylabel("GB/s (least bytes / time)")
            ax.set_title(f"{op} {d}")
            ax.set_ylim(bottom=0)
            ax.grid(alpha=0.3)
        axes[0][0].legend(fontsize=7)
        fig.suptitle(device, fontsize=9)
        fig.tight_layout()
        path = os.path.join(out_dir, f"bandwidth_{op.replace('+', '_')}.png")
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    return paths


def plot_ladder(results: list[Result], out_dir: str) -> list[str]:
    """Bars: every softmax algorithm, then XLA and the copy, at each ladder row length."""
    plt = _pyplot()
    rs = [r for r in results if r.case.op == "softmax" and r.case.direction == "fwd"]
    if plt is None or not rs:
        return []
    cols = sorted({r.case.shape[-1] for r in rs})
    fig, axes = plt.subplots(1, len(cols), figsize=(4 + 1.2 * len({r.case.algorithm for r in rs}), 4),
                             squeeze=False)
    for ax, c in zip(axes[0], cols):
        sel = [r for r in rs if r.case.shape[-1] == c]
        names = [r.case.algorithm for r in sel] + ["XLA", "copy"]
        values = [r.gbps(r.ours_ms) for r in sel] + [sel[0].gbps(sel[0].xla_ms), sel[0].copy_gbps]
        colors = ["C0"] * len(sel) + ["C1", "0.5"]
        ax.bar(range(len(names)), values, color=colors)
        ax.set_xticks(range(len(names)), names, rotation=45, ha="right", fontsize=8)
        ax.set_ylabel("GB/s")
        ax.set_title(f"softmax fwd f32, C = {c}")
    fig.suptitle(environment()["device"], fontsize=9)
    fig.tight_layout()
    path = os.path.join(out_dir, "softmax_ladder.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return [path]
