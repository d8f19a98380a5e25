#!/usr/bin/env python3
"""torch.distributed's all-reduce and all-gather bus bandwidth, the baseline of
sparkrt_collectives_bench (bench/gpu/collectives_bench.cc).

    python3 tools/gpu/torch_collectives_bench.py [--devices N] [--min-bytes B]
        [--max-bytes B] [--iters 20] [--reps 5] [--ops all_reduce,all_gather]
        [--json FILE]

One process per GPU (torch.multiprocessing.spawn), the nccl backend. Sizes,
warm-up, timing and formulas are the sparkrt bench's: sizes double from
--min-bytes to --max-bytes; per repetition every rank meets at a host barrier
(a gloo group) and records CUDA events around --iters back-to-back collectives;
a repetition's time is the slowest rank's elapsed / iters; the median over
--reps is reported with min-max. algbw = bytes / time (GB/s = 1e9 B/s);
all_reduce (f32 sum, in place) busbw = algbw * 2(n-1)/n with bytes = each
rank's buffer; all_gather (all_gather_into_tensor) busbw = algbw * (n-1)/n with
bytes = the gathered total. One rank: busbw is n/a (null). After the timings
one all-reduce and one all-gather of the largest size are checked against
every rank's data; a failed check reports no bandwidth. The JSON has the
sparkrt bench's shape; tools/gpu/collectives_compare.py reads both.
"""
import argparse
import datetime
import json
import os
import socket
import statistics
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

WARMUP = 5
BLOCK_ELEMS = 1 << 20  # the fill pattern's period, as in the sparkrt bench


def nccl_library():
    v = torch.cuda.nccl.version()
    return "NCCL " + (".".join(str(x) for x in v) if isinstance(v, tuple) else str(v))


def cases(args, n):
    out = []
    for op in args.ops:
        b = args.min_bytes
        while b <= args.max_bytes:
            count = b // 4 if op == "all_reduce" else b // 4 // n
            if count:
                out.append({"op": op, "count": count,
                            "bytes": count * 4 * (1 if op == "all_reduce" else n)})
            b *= 2
    return out


def block(rank, elems, device):
    """Rank's random, never-zero block (magnitude in [0.25, 2), random sign);
    any rank can rebuild any other's for the check."""
    g = torch.Generator(device=device).manual_seed(20261203 + rank)
    mag = torch.rand(elems, generator=g, device=device) * 1.75 + 0.25
    sign = torch.randint(0, 2, (elems,), generator=g, device=device) * 2 - 1
    return mag * sign


def fill(buf, blk):
    """Repeats blk over buf."""
    for off in range(0, buf.numel(), blk.numel()):
        n = min(blk.numel(), buf.numel() - off)
        buf[off:off + n].copy_(blk[:n])


def worker(rank, n, port, args, result_path):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.cuda.set_device(rank)
    device = torch.device("cuda", rank)
    dist.init_process_group("nccl", rank=rank, world_size=n, device_id=device)
    host = dist.new_group(backend="gloo")  # the host barrier, off the GPU
    max_elems = args.max_bytes // 4
    blk_elems = min(BLOCK_ELEMS, max_elems)
    blk = block(rank, blk_elems, device)
    x = torch.empty(max_elems, dtype=torch.float32, device=device)
    y = torch.empty(max_elems, dtype=torch.float32, device=device)
    fill(x, blk)
    torch.cuda.synchronize()
    todo = cases(args, n)

    def issue(c):
        if c["op"] == "all_reduce":
            # In place, as the sparkrt bench: the repeated sums grow the values
            # (to inf), which NCCL's speed does not depend on.
            dist.all_reduce(x[:c["count"]])
        else:
            dist.all_gather_into_tensor(y[:c["count"] * n], x[:c["count"]])

    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    ms = []
    for c in todo:
        for _ in range(WARMUP):
            issue(c)
        torch.cuda.synchronize()
        times = []
        for _ in range(args.reps):
            dist.barrier(group=host)
            start.record()
            for _ in range(args.iters):
                issue(c)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        ms.append(times)

    # The check: fresh data, one call of each op at its largest size.
    problems = []
    blocks = [block(r, blk_elems, device) for r in range(n)]
    for op in args.ops:
        last = [c for c in todo if c["op"] == op]
        if not last:
            continue
        c = last[-1]
        count = c["count"]
        fill(x, blk)
        y.fill_(float("nan"))
        issue(c)
        torch.cuda.synchronize()
        if op == "all_reduce":
            want = torch.zeros(count, dtype=torch.float32, device=device)
            bound = torch.zeros(count, dtype=torch.float32, device=device)
            for b in blocks:
                rep = b.repeat((count + blk_elems - 1) // blk_elems)[:count]
                want += rep
                bound += rep.abs()
            bound *= 2 * n * torch.finfo(torch.float32).eps
            got = x[:count]
        else:
            want = torch.cat([b.repeat((count + blk_elems - 1) // blk_elems)[:count]
                              for b in blocks])
            bound = torch.zeros_like(want)
            got = y[:count * n]
        bad = ~((got - want).abs() <= bound)
        nbad = int(bad.sum())
        if nbad:
            j = int(bad.nonzero()[0])
            problems.append(f"{op} element {j}: got {float(got[j])}, want {float(want[j])} "
                            f"({nbad} of {got.numel()} wrong)")

    gathered = [None] * n
    dist.all_gather_object(gathered, {"ms": ms, "problems": problems}, group=host)
    if rank == 0:
        with open(result_path, "w") as f:
            json.dump({"ranks": gathered, "cases": todo, "device": torch.cuda.get_device_name(0),
                       "library": nccl_library()}, f)
    dist.barrier(group=host)
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def gbps(nbytes, us, factor=1.0):
    return None if factor <= 0 or us <= 0 else nbytes / (us * 1e-6) / 1e9 * factor


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--devices", type=int, default=0, help="processes, one a GPU (default: all)")
    p.add_argument("--min-bytes", type=int, default=1 << 20)
    p.add_argument("--max-bytes", type=int, default=1 << 30)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--ops", default="all_reduce,all_gather")
    p.add_argument("--json")
    args = p.parse_args()
    args.ops = args.ops.split(",")
    if any(op not in ("all_reduce", "all_gather") for op in args.ops):
        sys.exit("--ops: all_reduce and/or all_gather")
    if not 4 <= args.min_bytes <= args.max_bytes or args.iters < 1 or args.reps < 1:
        sys.exit("need 4 <= --min-bytes <= --max-bytes, --iters and --reps >= 1")
    n = args.devices or torch.cuda.device_count()
    if n < 1 or n > torch.cuda.device_count():
        sys.exit(f"--devices {n}: {torch.cuda.device_count()} GPU(s) present")
    library = nccl_library()
    print(f"torch {torch.__version__}, {library} (torch.cuda.nccl.version())", flush=True)

    result_path = f"/tmp/torch_collectives_{os.getpid()}.json"
    mp.spawn(worker, args=(n, free_port(), args, result_path), nprocs=n, join=True)
    with open(result_path) as f:
        res = json.load(f)
    os.remove(result_path)
    problems = [f"rank {r}: {m}" for r, rk in enumerate(res["ranks"]) for m in rk["problems"]]
    if problems:
        sys.exit("torch_collectives_bench: check failed: " + "; ".join(problems))

    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    print(f"torch_collectives_bench: {n} x {res['device']}, collectives: {res['library']}, {date}")
    print(f"f32; {args.iters} collectives per timing, median (min-max) of {args.reps} reps, the "
          "slowest rank's time; GB/s = 1e9 B/s\nall_reduce: sum in place, bytes = each rank's "
          "buffer, busbw = algbw * 2(n-1)/n\nall_gather: bytes = the gathered total (bytes/n "
          "from each rank), busbw = algbw * (n-1)/n")
    print(f"check: {', '.join(args.ops)} of the largest size, every rank, against the ranks' "
          "data: passed")
    print(f"{'op':<10} {'bytes':>12} {'us':>10} {'us min-max':>21} {'algbw':>10} {'busbw':>10} "
          f"{'busbw min-max':>19}")
    fmt = lambda v: "n/a" if v is None else f"{v:.2f}"  # noqa: E731
    results = []
    for i, c in enumerate(res["cases"]):
        us = [1000.0 * max(rk["ms"][i][rep] for rk in res["ranks"]) / args.iters
              for rep in range(args.reps)]
        med, lo, hi = statistics.median(us), min(us), max(us)
        fb = 0.0 if n == 1 else (2.0 * (n - 1) / n if c["op"] == "all_reduce" else (n - 1) / n)
        b = c["bytes"]
        row = {"op": c["op"], "bytes": b, "count": c["count"], "time_us": med,
               "time_us_min": lo, "time_us_max": hi, "algbw_gbps": gbps(b, med),
               "algbw_gbps_min": gbps(b, hi), "algbw_gbps_max": gbps(b, lo),
               "busbw_gbps": gbps(b, med, fb), "busbw_gbps_min": gbps(b, hi, fb),
               "busbw_gbps_max": gbps(b, lo, fb)}
        results.append(row)
        rng = "n/a" if fb == 0 else f"{fmt(row['busbw_gbps_min'])}-{fmt(row['busbw_gbps_max'])}"
        print(f"{c['op']:<10} {b:>12} {med:>10.2f} {f'{lo:.2f}-{hi:.2f}':>21} "
              f"{fmt(row['algbw_gbps']):>10} {fmt(row['busbw_gbps']):>10} {rng:>19}")
    if args.json:
        out = {"bench": "torch_collectives_bench", "impl": "torch", "device": res["device"],
               "date": date, "backend": "nccl", "library": res["library"],
               "torch": torch.__version__, "n": n, "iters": args.iters, "reps": args.reps,
               "dtype": "f32",
               "all_reduce": "sum, in place; bytes = each rank's buffer; busbw = algbw * 2(n-1)/n",
               "all_gather": "bytes = the gathered total; busbw = algbw * (n-1)/n",
               "check": "passed", "results": results}
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()
