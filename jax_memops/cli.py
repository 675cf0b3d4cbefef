"""The `jax-memops` command: `bench` (ours vs XLA's jitted equivalents) and `info`."""

from __future__ import annotations

import argparse
import json
import platform
import sys

import jax
import jaxlib

from ._ext import build_info


def _info() -> dict:
    return {
        "jax_memops": build_info(),
        "jax": jax.__version__,
        "jaxlib": jaxlib.__version__,
        "python": platform.python_version(),
        "backend": jax.default_backend(),
        "devices": [f"{d.platform}:{d.id} {d.device_kind}" for d in jax.devices()],
    }


def cmd_info(args) -> int:
    info = _info()
    b = info["jax_memops"]
    print(f"jax_memops {b['version']} (built against jaxlib {b['jaxlib_built_against']}, "
          f"XLA FFI API {b['ffi_api']})")
    cuda = f"yes, CUDA {b['cuda_version']}, archs {b['cuda_archs']}" if b["cuda"] else "no"
    print(f"CUDA kernels compiled: {cuda}")
    print(f"jax {info['jax']}, jaxlib {info['jaxlib']}, Python {info['python']}")
    print(f"default backend: {info['backend']}; devices: {', '.join(info['devices'])}")
    return 0


def cmd_bench(args) -> int:
    from . import bench

    platform_ = jax.default_backend()
    cases = bench.quick_cases(platform_) if args.quick else bench.default_cases(platform_)
    cases = [c for c in cases if c.op in args.ops and c.direction in args.dirs and c.dtype in args.dtypes]
    if not cases:
        print("jax-memops bench: no case matches the options", file=sys.stderr)
        return 2
    iters, reps = (3, 3) if platform_ == "cpu" else (20, 7)
    print(f"jax-memops bench on {jax.devices()[0].device_kind} ({platform_}): {len(cases)} cases, "
          f"median of {reps} x {iters} calls", flush=True)
    key = jax.random.key(args.seed)
    results = []
    print(bench.table_header(), flush=True)
    for i, case in enumerate(cases):  # each row as soon as it is measured: a cut-off run keeps its rows
        key, sub = jax.random.split(key)
        print(f"[{i + 1}/{len(cases)}] {case.label}", file=sys.stderr, flush=True)
        results.append(bench.run_case(case, sub, iters, reps))
        print(bench.table_row(results[-1]), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"info": _info(), "results": [
                {**r.case.__dict__, "shape": list(r.case.shape), "ours_ms": r.ours_ms, "xla_ms": r.xla_ms,
                 "speedup": r.speedup, "ours_gbps": r.ours_gbps, "max_rel_diff": r.max_rel_diff}
                for r in results]}, f, indent=1)
    return 0


def main(argv=None) -> int:
    from . import bench

    parser = argparse.ArgumentParser(prog="jax-memops", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p_info = sub.add_parser("info", help="versions, CUDA build, devices")
    p_info.set_defaults(func=cmd_info)
    p_bench = sub.add_parser("bench", help="check each op against XLA's jitted equivalent and time both")
    p_bench.add_argument("--quick", action="store_true",
                         help="a small sweep (seconds; for a CPU or a smoke run)")
    p_bench.add_argument("--ops", nargs="+", choices=bench.OPS, default=list(bench.OPS))
    p_bench.add_argument("--dirs", nargs="+", choices=bench.DIRECTIONS, default=list(bench.DIRECTIONS))
    p_bench.add_argument("--dtypes", nargs="+", choices=list(bench.DTYPES), default=["float32", "bfloat16"])
    p_bench.add_argument("--seed", type=int, default=0)
    p_bench.add_argument("--json", help="also write every number and the versions to this JSON file")
    p_bench.set_defaults(func=cmd_bench)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
