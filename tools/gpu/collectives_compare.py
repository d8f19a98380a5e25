#!/usr/bin/env python3
"""sparkrt's collectives against torch.distributed, from the two benches' JSON.

    collectives_compare.py --sparkrt S.json [S2.json ...] --torch T.json [T2.json ...]
        [--goal 0.95]

Reads runs of sparkrt_collectives_bench and tools/gpu/torch_collectives_bench.py
(the same n, sizes and ops) and prints a markdown table, size x op: each side's
busbw (mean of its runs), and the ratio sparkrt / torch (mean, with its spread
over every pairing of a sparkrt run with a torch run). With one rank there is
no bus bandwidth: the table then compares algbw and says so. Below the table:
the lowest ratio against the goal.
"""
import argparse
import itertools
import json
import sys


def load(paths):
    runs = []
    for path in paths:
        with open(path) as f:
            runs.append(json.load(f))
    return runs


def figures(run, key):
    return {(r["op"], r["bytes"]): r[key] for r in run["results"] if r.get(key) is not None}


def mib(nbytes):
    return f"{nbytes / (1 << 20):g} MiB" if nbytes >= 1 << 20 else f"{nbytes} B"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sparkrt", nargs="+", required=True)
    p.add_argument("--torch", nargs="+", required=True)
    p.add_argument("--goal", type=float, default=0.95)
    args = p.parse_args()
    ours, theirs = load(args.sparkrt), load(args.torch)
    ns = {run["n"] for run in ours + theirs}
    if len(ns) != 1:
        sys.exit(f"collectives_compare: the runs differ in rank count: {sorted(ns)}")
    n = ns.pop()
    key = "busbw_gbps" if n > 1 else "algbw_gbps"
    libs = sorted({run.get("library", "?") for run in ours + theirs})
    print(f"{n} x {ours[0]['device']}; libraries: {', '.join(libs)}"
          + ("" if len(libs) == 1 else " (they differ: not the same NCCL)"))
    if n == 1:
        print("one rank: no bus traffic, algbw compared (plumbing, not the bus-bandwidth goal)")
    print()
    label = "busbw" if n > 1 else "algbw"
    print(f"| op | bytes | sparkrt {label} GB/s | torch {label} GB/s | sparkrt / torch (spread) |")
    print("| --- | ---: | ---: | ---: | --- |")
    s_runs = [figures(r, key) for r in ours]
    t_runs = [figures(r, key) for r in theirs]
    keys = [k for k in s_runs[0] if all(k in run for run in s_runs + t_runs)]
    worst = None
    for k in keys:
        s = [run[k] for run in s_runs]
        t = [run[k] for run in t_runs]
        ratios = [a / b for a, b in itertools.product(s, t) if b > 0]
        if not ratios:
            continue
        mean = sum(ratios) / len(ratios)
        if worst is None or mean < worst[0]:
            worst = (mean, k)
        print(f"| {k[0]} | {mib(k[1])} | {sum(s) / len(s):.1f} | {sum(t) / len(t):.1f} | "
              f"{mean:.3f} ({min(ratios):.3f}-{max(ratios):.3f}) |")
    if worst is None:
        sys.exit("collectives_compare: no size and op measured by both sides")
    verdict = "meets" if worst[0] >= args.goal else "misses"
    print(f"\nlowest ratio {worst[0]:.3f} ({worst[1][0]}, {mib(worst[1][1])}): {verdict} the "
          f"goal of {args.goal:.2f}" + ("" if n > 1 else " (one rank: not the goal's measure)"))


if __name__ == "__main__":
    main()
