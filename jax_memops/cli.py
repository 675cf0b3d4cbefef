"""The `jax-memops` command.

    jax-memops info                 versions, CUDA build and archs, the devices JAX sees
    jax-memops bench [--quick]      ours vs XLA's jitted equivalents: a sweep over ops, directions,
                                    dtypes and row lengths, the softmax ladder, a transformer block
"""

from __future__ import annotations

import argparse
import os
import sys

import jax

from . import bench
from ._ext import build_info

PARTS = ("sweep", "ladder", "model", "mlp", "fusion")


def cmd_info(args) -> int:
    b = build_info()
    print(f"jax_memops {b['version']} (built against jaxlib {b['jaxlib_built_against']}, "
          f"XLA FFI API {b['ffi_api']})")
    cuda = f"yes, CUDA {b['cuda_version']}, archs {b['cuda_archs']}" if b["cuda"] else "no"
    print(f"CUDA kernels compiled: {cuda}")
    made = ", ".join(f"{name} build {'present' if b[f'cpu_{isa}_library'] else 'not built'}"
                     for isa, name in (("avx2", "AVX2"), ("avx512", "AVX-512")))
    print(f"CPU handlers: the {b['cpu_isa']} build ({made}; JAX_MEMOPS_CPU_ISA=auto|baseline|avx2|avx512)")
    import jaxlib
    import platform

    print(f"jax {jax.__version__}, jaxlib {jaxlib.__version__}, Python {platform.python_version()}")
    devices = ", ".join(f"{d.platform}:{d.id} {d.device_kind}" for d in jax.devices())
    print(f"default backend: {jax.default_backend()}; devices: {devices}")
    return 0


class Progress:
    """A one-line progress bar on stderr (a line per step when stderr is not a terminal)."""

    def __init__(self, total: int):
        self.total, self.done, self.tty = total, 0, sys.stderr.isatty()

    def step(self, label: str) -> None:
        self.done += 1
        filled = 30 * self.done // max(self.total, 1)
        line = f"[{'#' * filled}{'.' * (30 - filled)}] {self.done}/{self.total} {label}"
        print(("\r" + line[:120].ljust(120)) if self.tty else line, end="" if self.tty else "\n",
              file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.tty:
            print(file=sys.stderr)


def _cases(args, gpu: bool) -> tuple[list[bench.Case], list[bench.Case]]:
    """(sweep cases, ladder cases) for the options."""
    ops = bench.OPS if "all" in args.ops else tuple(args.ops)
    elements = args.elements or (bench.DEFAULT_ELEMENTS if gpu else 1 << 16)
    if args.quick and not args.cols:
        sweep = bench.quick_cases(ops, args.dirs, args.dtypes)
    else:
        cols = {op: tuple(args.cols) if args.cols else bench.DEFAULT_COLS[op] for op in ops}
        sweep = bench.grid(ops, args.dirs, args.dtypes, cols, elements)
    ladder = bench.ladder_cases(elements if not args.quick else 1 << 14)
    return bench.with_out_dtypes(sweep, args.out_dtypes or ()), ladder


def cmd_bench(args) -> int:
    from . import bench_model, bench_report

    gpu = jax.default_backend() == "gpu"
    parts = ("ladder",) if args.softmax_ladder else ("fusion",) if args.fusion else tuple(args.parts)
    sweep, ladder = _cases(args, gpu)
    sweep = sweep if "sweep" in parts else []
    ladder = ladder if "ladder" in parts else []
    # a GPU's default tensors take 35-150 us a call; a CPU's small ones ~0.1 ms, where few calls are noise
    iters, reps = (args.iters or (20 if gpu else None)), (args.reps or (7 if gpu else 5))
    os.makedirs(args.out, exist_ok=True)
    env = bench_report.environment(args.timing)
    print(f"jax-memops bench on {env['device']} (jax {env['jax']}): {len(sweep)} sweep cases, "
          f"{len(ladder)} ladder cases{', a transformer block' if 'model' in parts else ''}; "
          f"median of {reps} x {iters or 'auto (10 ms)'} calls, {args.timing} timing", flush=True)
    fusion_sizes = [(n, dt) for n in (bench.FUSION_ELEMENTS if gpu and not args.quick else (1 << 16,))
                    for dt in args.dtypes] if "fusion" in parts else []
    mlp_configs = ((bench_model.QUICK_MLP_CONFIGS if args.quick or not gpu else bench_model.MLP_CONFIGS)
                   if "mlp" in parts else ())
    progress = Progress(len(sweep) + len(ladder) + ("model" in parts) + len(mlp_configs) + len(fusion_sizes))
    key = jax.random.key(args.seed)
    results: dict[str, list] = {"sweep": [], "ladder": []}
    print(bench_report.table_header(), flush=True)
    for part, cases in (("sweep", sweep), ("ladder", ladder)):
        for case in cases:  # each row as soon as it is measured: a cut-off run keeps its rows
            key, sub = jax.random.split(key)
            progress.step(case.label)
            results[part].append(bench.run_case(case, sub, iters, reps, args.timing))
            print(bench_report.table_row(results[part][-1]), flush=True)
    model = None
    if "model" in parts:
        progress.step("transformer block fwd+bwd")
        cfg = bench_model.QUICK_CONFIG if args.quick or not gpu else bench_model.BlockConfig()
        model = bench_model.run(cfg, key, iters, reps, args.timing)
    mlps = []
    for cfg in mlp_configs:
        progress.step(f"MLP block {cfg.tokens}x{cfg.width} fwd+bwd")
        mlps.append(bench_model.run_mlp(cfg, key, iters, reps, args.timing))
    fusion = []
    for n, dtype in fusion_sizes:
        key, sub = jax.random.split(key)
        progress.step(f"fusion n={n} {dtype}")
        fusion.append(bench.fusion_case(n, dtype, sub, iters, reps, args.timing))
    progress.close()
    if fusion:
        print("\nscale -> bias -> GELU, fused kernel vs three kernels vs XLA:\n" + bench.fusion_table(fusion))
    if model:
        print(f"\nGPT-2-style block {model['config']} bf16 fwd+bwd: jm {model['jm_ms']:.3f} ms, "
              f"XLA {model['xla_ms']:.3f} ms, speedup {model['speedup']:.2f}")

    for m in mlps:
        print(f"MLP block (Dense -> bias+GELU -> Dense) tokens={m['config']['tokens']} width={m['config']['width']} "
              f"bf16 fwd+bwd: jm {m['jm_ms']:.3f} ms, XLA {m['xla_ms']:.3f} ms, speedup {m['speedup']:.2f}")

    everything = results["sweep"] + results["ladder"]
    bench_report.write_json(os.path.join(args.out, "results.json"), everything,
                            {"model": model, "mlp": mlps, "fusion": fusion, "parts": list(parts)}, args.timing)
    with open(os.path.join(args.out, "results.md"), "w") as f:
        f.write(bench_report.markdown_table(everything) + "\n")
    plots = bench_report.plot_bandwidth(results["sweep"], args.out) + bench_report.plot_ladder(
        results["ladder"], args.out)
    if not plots and everything:
        print("(no plots: install matplotlib)", file=sys.stderr)
    print(f"\nwrote {args.out}/results.json, results.md" + "".join(f", {os.path.basename(p)}" for p in plots))
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="jax-memops", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("info", help="versions, CUDA build, devices").set_defaults(func=cmd_info)
    p = sub.add_parser("bench", help="check each op against XLA's jitted equivalent, then time both")
    p.add_argument("--quick", action="store_true", help="small tensors: seconds on a CPU, a smoke run on a GPU")
    p.add_argument("--ops", nargs="+", choices=bench.OPS + ("all",), default=["all"])
    p.add_argument("--dirs", nargs="+", choices=bench.DIRECTIONS, default=list(bench.DEFAULT_DIRECTIONS),
                   help="fwd, bwd (from saved residuals), fwd+bwd (a training step's VJP), jvp (forward-mode "
                        "AD: y and its tangent); default all but jvp")
    p.add_argument("--dtypes", nargs="+", choices=list(bench.DTYPES), default=["float32", "bfloat16"])
    p.add_argument("--out-dtypes", nargs="+", choices=list(bench.DTYPES),
                   help="the norms also with y in these dtypes where they differ from x's (their dtype=), against "
                        "XLA's normalization of x converted to float32")
    p.add_argument("--cols", nargs="+", type=int, help="row lengths C (default: the grid of each op)")
    p.add_argument("--elements", type=int,
                   help="elements per tensor, rows = elements // C (default 2^26 on a GPU, 2^16 elsewhere)")
    p.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS),
                   help="what to run: the op sweep, the softmax ladder, the transformer block, the MLP block "
                        "(fused bias+GELU custom call vs XLA's matmul epilogue), the fusion experiment")
    p.add_argument("--softmax-ladder", action="store_true",
                   help="only the seed's softmax story: every algorithm vs XLA and the copy")
    p.add_argument("--fusion", action="store_true",
                   help="only the fusion experiment: fused scale-bias-GELU vs three kernels vs XLA")
    p.add_argument("--iters", type=int,
                   help="back-to-back calls per timing (default 20 on a GPU; elsewhere, per function, as many as "
                        "take 10 ms)")
    p.add_argument("--reps", type=int, help="timings per function, the median is kept (default 7 GPU, 5 CPU)")
    p.add_argument("--timing", choices=bench.TIMINGS, default="wall",
                   help="wall: wall clock over back-to-back jitted calls, what a user's loop pays (default); "
                        "device: the device's busy time per call from a profiler trace, without each call's "
                        "dispatch cost (kernels alone, as the seeds timed them; needs CUPTI on a GPU)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="bench-out", help="folder for results.json, results.md and the plots")
    p.set_defaults(func=cmd_bench)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
