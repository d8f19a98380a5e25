#!/usr/bin/env python3
"""Tables of an A/B run (tools/gpu/ab_bench.sh): per decode shape the time of
build A and build B (median of their two runs), B / A, and the spread of B / A
over the run pairs (run 1 with run 1, run 2 with run 2); and the launch ratio
of each build.

  tools/gpu/ab_compare.py RESULTS_DIR
"""
import json
import statistics
import sys
from pathlib import Path


def load(d, bench, label, n):
    p = d / f"{bench}.{label}.{n}.json"
    return json.loads(p.read_text()) if p.exists() else None


def decode_rows(doc, bench):
    rows = doc["results"] if bench == "kv" else doc["decode"]
    out = {}
    for r in rows:
        key = (r["op"], r.get("dtype", ""), r["batch"], r["context"], r["num_q_heads"],
               r["num_kv_heads"])
        out[key] = r["us"]
    return out


def main():
    d = Path(sys.argv[1])
    print("| op | dtype | batch | context | q/kv heads | A µs | B µs | B / A | spread |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    ratios = []
    for bench in ("kv", "mla"):
        runs = {(l, n): load(d, bench, l, n) for l in "AB" for n in (1, 2)}
        if any(v is None for v in runs.values()):
            print(f"missing {bench} results", file=sys.stderr)
            return 1
        rows = {k: decode_rows(v, bench) for k, v in runs.items()}
        for key in rows[("A", 1)]:
            a = [rows[("A", n)][key] for n in (1, 2)]
            b = [rows[("B", n)][key] for n in (1, 2)]
            pair = [b[i] / a[i] for i in range(2)]
            ratio = statistics.median(b) / statistics.median(a)
            ratios.append(ratio)
            op, dtype, batch, ctx, hq, hkv = key
            print(f"| {op} | {dtype or '—'} | {batch} | {ctx} | {hq}/{hkv} | "
                  f"{statistics.median(a):.2f} | {statistics.median(b):.2f} | {ratio:.3f} | "
                  f"{min(pair):.3f}–{max(pair):.3f} |")
    print()
    print(f"decode B / A over {len(ratios)} shapes: median {statistics.median(ratios):.3f}, "
          f"range {min(ratios):.3f}–{max(ratios):.3f}")
    for label in "AB":
        vals = [load(d, "launch", label, n) for n in (1, 2)]
        if all(vals):
            r = [v["launch_ratio_sparkrt_vs_raw"] for v in vals]
            print(f"launch ratio sparkrt / raw, build {label}: {r[0]:.3f}, {r[1]:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
