"""Where a kernel's warps wait, per SASS instruction: a summary of Nsight Compute's source page
(`ncu -i REPORT --page source --csv --print-source sass`, one kernel per file; ab_v17.sh's `src` stage
writes them) — the samples by stall reason, then the instructions holding the most samples, each with the
two before it (a wait shows up on the instruction after the one that waits: the branch after an mbarrier
try_wait, the first use of a load's register). With --elements N (the elements the kernel's launch
covers), also the executed thread instructions per element, in all and by opcode (predicated-off lanes
counted: warp instructions x 32 / N).

    python3 benchmarks/ncu_source.py src-0.csv [src-1.csv ...] [--top 12] [--elements 67108864]
"""

from __future__ import annotations

import argparse
import collections
import csv
import re

SAMPLES = "Warp Stall Sampling (All Samples)"
EXECUTED = "Instructions Executed"


def per_element(instrs: list, col: dict, elements: int) -> str:
    """Executed thread instructions per element, in all and by opcode (the 16 most frequent)."""
    ops = collections.Counter()
    for r in instrs:
        op = re.sub(r"^@!?U?P\w+\s+", "", r[1].strip()).split(" ")[0].split(".")[0]
        ops[op] += int(r[col[EXECUTED]] or 0) * 32 / elements
    return (f"  thread instructions per element: {sum(ops.values()):.1f}\n  " +
            ", ".join(f"{k} {v:.1f}" for k, v in ops.most_common(16)))


def summarize(path: str, top: int, elements: int = 0) -> list[str]:
    rows = list(csv.reader(open(path, newline="")))
    kernel = rows[0][1] if rows and len(rows[0]) > 1 else path
    header = rows[1]
    col = {h: i for i, h in enumerate(header)}
    seen, instrs = set(), []
    for r in rows[2:]:  # the page repeats instructions: keep each address once
        if r and r[0].startswith("0x") and r[0] not in seen:
            seen.add(r[0])
            instrs.append(r)
    reasons = [h for h in header if h.startswith("stall_") and "Not Issued" not in h]
    total = sum(int(r[col[SAMPLES]] or 0) for r in instrs) or 1
    by_reason = {h[6:]: sum(int(r[col[h]] or 0) for r in instrs) for h in reasons}
    out = [kernel[:150],
           f"  {len(instrs)} instructions, {sum(int(r[col[EXECUTED]] or 0) for r in instrs)} warp instructions "
           f"executed, {total} samples",
           "  by reason: " + ", ".join(f"{k} {100 * v / total:.1f}%" for k, v in
                                       sorted(by_reason.items(), key=lambda t: -t[1]) if v >= total / 200)]
    order = sorted(range(len(instrs)), key=lambda i: -int(instrs[i][col[SAMPLES]] or 0))
    for i in order[:top]:
        r = instrs[i]
        share = 100 * int(r[col[SAMPLES]] or 0) / total
        main = max(reasons, key=lambda h: int(r[col[h]] or 0))[6:]
        before = " | ".join(p[1].strip()[:44] for p in instrs[max(0, i - 2):i])
        out.append(f"  {share:5.1f}% {main:13s} {r[1].strip()[:48]:48s} after: {before}")
    if elements:
        out.append(per_element(instrs, col, elements))
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("csv", nargs="+")
    p.add_argument("--top", type=int, default=12)
    p.add_argument("--elements", type=int, default=0, help="elements per launch: instructions per element")
    args = p.parse_args()
    for path in args.csv:
        print("\n".join(summarize(path, args.top, args.elements)) + "\n")


if __name__ == "__main__":
    main()
