#!/usr/bin/env python3
"""Summarises one kernel's Nsight Compute source page: where its warps stall.

Input: the CSV that `ncu --import REPORT --page source --csv --print-source sass`
writes for a report taken with the SourceCounters section (`--set full`).
Output: the warp-state samples summed per stall reason, the executed
instruction mix by opcode, and the instructions with the most samples (each
with its top reasons), so a phase of the kernel that dominates shows up
without the Nsight Compute GUI.

  tools/gpu/ncu_summary.py kernel_sass.csv [--top 25]
"""
import argparse
import collections
import csv
import signal
import sys

SAMPLES = "Warp Stall Sampling (All Samples)"
EXECUTED = "Instructions Executed"


def read_rows(path):
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    header_at = next((i for i, r in enumerate(rows) if r and r[0] == "Address"), None)
    if header_at is None:
        sys.exit(f"{path}: no 'Address' header row; is this a --page source --csv export?")
    header = rows[header_at]
    for needed in ("Source", SAMPLES, EXECUTED):
        if needed not in header:
            sys.exit(f"{path}: column '{needed}' missing; take the report with --set full")
    return header, [r for r in rows[header_at + 1:] if len(r) == len(header)]


def number(text):
    try:
        return int(text.replace(",", "")) if text else 0
    except ValueError:
        return 0


def opcode(source):
    words = source.split()
    if not words:
        return "?"
    op = words[1] if words[0].startswith("@") and len(words) > 1 else words[0]
    return op.split(".")[0]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv")
    parser.add_argument("--top", type=int, default=25, help="instructions to list")
    args = parser.parse_args()

    header, rows = read_rows(args.csv)
    col = {name: i for i, name in enumerate(header)}
    reasons = [h for h in header if h.startswith("stall_") and "Not Issued" not in h]

    per_reason = collections.Counter()
    per_opcode = collections.Counter()
    for r in rows:
        for h in reasons:
            per_reason[h] += number(r[col[h]])
        per_opcode[opcode(r[col["Source"]])] += number(r[col[EXECUTED]])

    total = sum(per_reason.values())
    print(f"warp-state samples: {total}")
    for h, v in per_reason.most_common():
        if v:
            print(f"  {h[len('stall_'):]:<20} {v:>9} {100.0 * v / max(total, 1):5.1f}%")
    executed = sum(per_opcode.values())
    print(f"executed warp instructions: {executed}")
    for op, v in per_opcode.most_common(20):
        print(f"  {op:<12} {v:>12} {100.0 * v / max(executed, 1):5.1f}%")
    print(f"top {args.top} instructions by samples (address, samples, sass, top reasons):")
    ranked = sorted(rows, key=lambda r: -number(r[col[SAMPLES]]))[: args.top]
    for r in ranked:
        top = sorted(((number(r[col[h]]), h[len("stall_"):]) for h in reasons), reverse=True)[:3]
        why = ", ".join(f"{name} {v}" for v, name in top if v)
        print(f"  {r[col['Address']]} {number(r[col[SAMPLES]]):>6}  "
              f"{r[col['Source']][:60]:<60}  {why}")


if __name__ == "__main__":
    # Piped into `head`, stop quietly when the reader has had enough.
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    main()
