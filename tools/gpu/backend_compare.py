#!/usr/bin/env python3
"""Vulkan against cuda from the GPU benches' JSON (tools/gpu/run_vulkan_suite.sh).

  backend_compare.py RESULTS_DIR

Reads kv_{writes,decode}_{cuda,vulkan}_{1,2}.json (sparkrt_kv_cache_bench) and prints a
markdown table: per configuration each backend's GB/s (mean of its runs) and the ratio
vulkan / cuda with its spread over every pairing of a vulkan run with a cuda run; then the
host cost of one launch. Where mla_{cuda,vulkan}_{1,2}.json (sparkrt_mla_bench) are present,
a second table gives the MLA decodes and the K3 attention kernel and steps in microseconds,
with the ratio cuda time / vulkan time (above 1: vulkan is faster).
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


def load_mla(folder, backend):
    runs = []
    for index in (1, 2):
        path = os.path.join(folder, f"mla_{backend}_{index}.json")
        if not os.path.exists(path):
            continue
        with open(path) as f:
            data = json.load(f)
        rows = {}
        for r in data.get("decode", []):
            rows[(r["op"], r["batch"], r["context"], r["num_q_heads"])] = r["us"]
        for r in data.get("k3_steps", []):
            rows[("k3 attention kernel", 1, r["context"], 64)] = r["kernel_us"]
            rows[(f"k3 step ({r['path']} KV)", 1, r["context"], 64)] = r["step_us"]
        runs.append(rows)
    return runs


def print_mla(folder):
    cuda, vulkan = load_mla(folder, "cuda"), load_mla(folder, "vulkan")
    if not cuda or not vulkan:
        return
    print("\n| op | batch | context | hq | cuda us | vulkan us | cuda / vulkan time (spread) |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | --- |")
    for key in cuda[0]:
        if not all(key in rows for rows in cuda + vulkan):
            continue
        c = [rows[key] for rows in cuda]
        v = [rows[key] for rows in vulkan]
        ratios = [a / b for a, b in itertools.product(c, v)]
        op, batch, context, hq = key
        print(f"| {op} | {batch} | {context} | {hq} | {sum(c) / len(c):.1f} | "
              f"{sum(v) / len(v):.1f} | {sum(ratios) / len(ratios):.2f} "
              f"({min(ratios):.2f}-{max(ratios):.2f}) |")


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    folder = sys.argv[1]
    cuda, vulkan = load(folder, "cuda"), load(folder, "vulkan")
    mla = load_mla(folder, "cuda") and load_mla(folder, "vulkan")
    if (not cuda or not vulkan) and not mla:
        sys.exit(f"backend_compare: need runs of both backends in {folder} "
                 f"({glob.glob(os.path.join(folder, '*.json'))})")
    if not cuda or not vulkan:
        print_mla(folder)
        return
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
    print_mla(folder)


if __name__ == "__main__":
    main()
