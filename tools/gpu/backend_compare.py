#!/usr/bin/env python3
"""Vulkan against cuda from sparkrt_kv_cache_bench's JSON (tools/gpu/run_vulkan_suite.sh).

  backend_compare.py RESULTS_DIR

Reads kv_{writes,decode}_{cuda,vulkan}_{1,2}.json and prints a markdown table: per
configuration each backend's GB/s (mean of its runs) and the ratio vulkan / cuda with its
spread over every pairing of a vulkan run with a cuda run; then the host cost of one launch.
"""
import glob
import itertools
import json
import os
import sys


def load(folder, backend):
    runs = []
    for index in (1, 2):
        rows, launch = {}, None
        for kind in ("writes", "decode"):
            path = os.path.join(folder, f"kv_{kind}_{backend}_{index}.json")
            if not os.path.exists(path):
                continue
            with open(path) as f:
                data = json.load(f)
            launch = data.get("launch_host_us", launch)
            for r in data["results"]:
                key = (r["op"], r["dtype"], r["tokens"], r["batch"], r["context"],
                       r["num_q_heads"], r["num_kv_heads"])
                rows[key] = r["gbps"]
        if rows:
            runs.append((rows, launch))
    return runs


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    folder = sys.argv[1]
    cuda, vulkan = load(folder, "cuda"), load(folder, "vulkan")
    if not cuda or not vulkan:
        sys.exit(f"backend_compare: need runs of both backends in {folder} "
                 f"({glob.glob(os.path.join(folder, 'kv_*.json'))})")
    print("| op | dtype | tokens | batch | context | hq/hkv | cuda GB/s | vulkan GB/s | "
          "vulkan / cuda (spread) |")
    print("| --- | --- | ---: | ---: | ---: | --- | ---: | ---: | --- |")
    for key in cuda[0][0]:
        if not all(key in rows for rows, _ in cuda + vulkan):
            continue
        c = [rows[key] for rows, _ in cuda]
        v = [rows[key] for rows, _ in vulkan]
        ratios = [b / a for a, b in itertools.product(c, v)]
        op, dtype, tokens, batch, context, hq, hkv = key
        print(f"| {op} | {dtype} | {tokens or ''} | {batch or ''} | {context or ''} | "
              f"{f'{hq}/{hkv}' if hq else ''} | {sum(c) / len(c):.0f} | {sum(v) / len(v):.0f} | "
              f"{sum(ratios) / len(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f}) |")
    lc = [l for _, l in cuda if l]
    lv = [l for _, l in vulkan if l]
    if lc and lv:
        ratios = [b / a for a, b in itertools.product(lc, lv)]
        print(f"\nhost cost of one launch (empty_10_args): cuda {sum(lc) / len(lc):.2f} us, "
              f"vulkan {sum(lv) / len(lv):.2f} us, vulkan / cuda {sum(ratios) / len(ratios):.2f} "
              f"({min(ratios):.2f}-{max(ratios):.2f})")


if __name__ == "__main__":
    main()
