#!/usr/bin/env python3
"""The decode-layer chain of sparkrt_decode_layer_bench, in PyTorch on CUDA.

    python3 tools/gpu/decode_layer_torch.py [--layers 32] [--context 4096] [--batch 1]
        [--reps 15] [--seed S] [--json FILE]

The same shape as the sparkrt bench (bench/gpu/decode_layer_bench.cc): 32
query heads, 8 KV heads, head_dim 128, rotary_dim 128, blocks of 16 tokens,
bf16, `--layers` layers with their own paged K/V caches (random, never zero)
holding `--context` tokens per sequence, their own scattered block tables and
inputs. One layer, for the step's new token of each of `--batch` sequences
(position context - 1):

  * the slot: block_table[seq, pos // 16] * 16 + pos % 16 (a gather);
  * K: RMSNorm over head_dim, then RoPE NeoX style (rotate-half) over the
    first rotary_dim dims, in f32, rounded once to bf16 (docs/kernels.md,
    "RoPE", "Precision regime of the fused K path"), written into the K cache
    with index_put_; V written the same way;
  * decode attention: torch.nn.functional.scaled_dot_product_attention of the
    query over the sequence's K/V gathered through its block table, GQA with
    enable_gqa (repeat_interleave where this torch lacks it).

All layers are captured into one CUDA graph, which is replayed after a
warm-up (SPARKRT_BENCH_WARMUP_MS, default 400 ms, as the sparkrt benches);
each rep times, between two events, the fewest back-to-back replays that take
at least 200 us (1 for the default shape). Every SDPA backend that accepts
the shape and captures is measured; per-layer microseconds (median, min, max
over reps) are printed for each and the fastest is named. Outputs are
poisoned (NaN) before the first replay and must come out finite.

Needs torch with CUDA; without it, says why and exits 77.
"""
import argparse
import datetime
import json
import math
import os
import statistics
import sys

Q_HEADS, KV_HEADS, HEAD_DIM, ROTARY_DIM, BLOCK = 32, 8, 128, 128, 16
RMS_EPS, THETA = 1e-6, 10000.0
MIN_SAMPLE_US = 200.0


def warm_up_ms():
    v = os.environ.get("SPARKRT_BENCH_WARMUP_MS", "")
    if not v:
        return 400.0
    try:
        ms = float(v)
    except ValueError:
        ms = -1.0
    if not 0.0 <= ms <= 600000.0:
        sys.exit(f"decode_layer_torch: SPARKRT_BENCH_WARMUP_MS='{v}' is not a number of "
                 "milliseconds from 0 to 600000")
    return ms


def random_bf16(torch, gen, shape, lo, hi):
    """Magnitudes in [lo, hi) with random signs: never zero."""
    mag = torch.rand(shape, generator=gen, device="cuda", dtype=torch.float32) * (hi - lo) + lo
    sign = torch.randint(0, 2, shape, generator=gen, device="cuda", dtype=torch.int8) * 2 - 1
    return (mag * sign).to(torch.bfloat16)


class Layer:
    def __init__(self, torch, gen, batch, context):
        bps = (context + BLOCK - 1) // BLOCK
        blocks = batch * bps + 1  # a spare block no sequence owns
        # Pools laid out [blocks][block][kv_heads][head_dim], flattened over
        # the first two: row `slot` is one token.
        self.k_cache = random_bf16(torch, gen, (blocks * BLOCK, KV_HEADS, HEAD_DIM), 0.25, 2.0)
        self.v_cache = random_bf16(torch, gen, (blocks * BLOCK, KV_HEADS, HEAD_DIM), 0.25, 2.0)
        ids = torch.randperm(blocks, generator=gen, device="cuda")[: batch * bps]
        self.block_table = ids.to(torch.int32).view(batch, bps)
        self.k_new = random_bf16(torch, gen, (batch, KV_HEADS, HEAD_DIM), 0.25, 2.0)
        self.v_new = random_bf16(torch, gen, (batch, KV_HEADS, HEAD_DIM), 0.25, 2.0)
        self.q = random_bf16(torch, gen, (batch, Q_HEADS, 1, HEAD_DIM), 0.25, 2.0)
        w = torch.rand((HEAD_DIM,), generator=gen, device="cuda", dtype=torch.float32) + 0.5
        self.weight = w.to(torch.bfloat16)
        self.out = torch.empty((batch, Q_HEADS, 1, HEAD_DIM), device="cuda", dtype=torch.bfloat16)


class Chain:
    def __init__(self, torch, F, args):
        self.torch, self.F = torch, F
        self.batch, self.context = args.batch, args.context
        gen = torch.Generator(device="cuda")
        gen.manual_seed(args.seed)
        self.layers = [Layer(torch, gen, args.batch, args.context) for _ in range(args.layers)]
        dev = "cuda"
        self.positions = torch.full((args.batch,), args.context - 1, device=dev, dtype=torch.int64)
        self.seqs = torch.arange(args.batch, device=dev)
        self.in_block = torch.arange(BLOCK, device=dev)
        half = ROTARY_DIM // 2
        self.inv_freq = THETA ** (-torch.arange(0, half, device=dev, dtype=torch.float32) * 2.0
                                  / ROTARY_DIM)
        self.scale = 1.0 / math.sqrt(HEAD_DIM)
        self.gqa = self._has_enable_gqa()

    def _has_enable_gqa(self):
        torch, F = self.torch, self.F
        q = torch.ones(1, 2, 1, 8, device="cuda", dtype=torch.bfloat16)
        kv = torch.ones(1, 1, 4, 8, device="cuda", dtype=torch.bfloat16)
        try:
            F.scaled_dot_product_attention(q, kv, kv, enable_gqa=True)
            return True
        except TypeError:
            return False

    def k_norm_rope(self, layer):
        torch = self.torch
        x = layer.k_new.float()
        y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + RMS_EPS) * layer.weight.float()
        angle = self.positions.float()[:, None] * self.inv_freq  # [batch, half]
        cos, sin = angle.cos()[:, None, :], angle.sin()[:, None, :]
        half = ROTARY_DIM // 2
        y1, y2 = y[..., :half], y[..., half:ROTARY_DIM]
        out = torch.cat([y1 * cos - y2 * sin, y2 * cos + y1 * sin, y[..., ROTARY_DIM:]], dim=-1)
        return out.to(torch.bfloat16)

    def layer_step(self, layer):
        torch, F = self.torch, self.F
        pos = self.positions
        bt = layer.block_table
        slots = bt[self.seqs, pos // BLOCK].to(torch.int64) * BLOCK + pos % BLOCK
        layer.k_cache.index_put_((slots,), self.k_norm_rope(layer))
        layer.v_cache.index_put_((slots,), layer.v_new)
        # Every token slot of each sequence, through its block table.
        ctx_slots = (bt.to(torch.int64)[:, :, None] * BLOCK + self.in_block).flatten(1)
        ctx_slots = ctx_slots[:, : self.context]
        k = layer.k_cache[ctx_slots].transpose(1, 2)  # [batch, kv_heads, context, head_dim]
        v = layer.v_cache[ctx_slots].transpose(1, 2)
        if self.gqa:
            o = F.scaled_dot_product_attention(layer.q, k, v, scale=self.scale, enable_gqa=True)
        else:
            group = Q_HEADS // KV_HEADS
            o = F.scaled_dot_product_attention(layer.q, k.repeat_interleave(group, dim=1),
                                               v.repeat_interleave(group, dim=1), scale=self.scale)
        layer.out.copy_(o)

    def step(self):
        for layer in self.layers:
            self.layer_step(layer)

    def poison(self):
        for layer in self.layers:
            layer.out.view(self.torch.int16).fill_(-1)  # 0xffff: a bf16 NaN

    def check(self, what):
        for i, layer in enumerate(self.layers):
            if not bool(self.torch.isfinite(layer.out).all()):
                sys.exit(f"decode_layer_torch: check FAILED after {what}: layer {i} has "
                         "non-finite outputs")


def measure(torch, chain, backend, layers, reps):
    """Per-layer microseconds of graph replays of the whole chain under one SDPA backend."""
    def run():
        if backend is None:
            chain.step()
        else:
            with backend[0](backend[1]):
                chain.step()

    run()  # eager first: a backend that refuses the shape fails here
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):  # warm-up on a side stream, as capture wants
            run()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        run()
    chain.poison()
    graph.replay()
    torch.cuda.synchronize()
    chain.check("the first graph replay")

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def timed(n):
        start.record()
        for _ in range(n):
            graph.replay()
        end.record()
        end.synchronize()
        return 1000.0 * start.elapsed_time(end) / n

    budget = warm_up_ms() / 1000.0
    t0 = datetime.datetime.now()
    while (datetime.datetime.now() - t0).total_seconds() < budget:
        for _ in range(8):
            graph.replay()
        torch.cuda.synchronize()
    est = max(statistics.median(timed(1) for _ in range(3)), 1e-3)
    n = max(1, min(64, math.ceil(MIN_SAMPLE_US / est)))
    per_layer = [timed(n) / layers for _ in range(reps)]
    chain.check("the timed replays")
    del graph
    return {"median": statistics.median(per_layer), "min": min(per_layer),
            "max": max(per_layer)}, n


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--context", type=int, default=4096)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--seed", type=int, default=20261205)
    ap.add_argument("--json", help="write the numbers here")
    args = ap.parse_args()
    for name in ("layers", "context", "batch", "reps"):
        if getattr(args, name) < 1:
            ap.error(f"--{name} must be at least 1")
    try:
        import torch
        import torch.nn.functional as F
    except ImportError as e:
        print(f"SKIPPED: torch is not importable: {e}")
        return 77
    if not torch.cuda.is_available():
        print(f"SKIPPED: torch {torch.__version__} sees no CUDA device")
        return 77
    # The same SDPA backends the KV-cache baseline times (this script's folder
    # is on sys.path when it runs as a script).
    from kv_torch_baseline import sdpa_backends

    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    device = torch.cuda.get_device_name()
    chain = Chain(torch, F, args)
    torch.cuda.synchronize()
    print(f"decode_layer_torch: {device}, torch {torch.__version__}, {date}; seed {args.seed}")
    print(f"shape: {args.layers} layers, batch {args.batch}, context {args.context}, "
          f"{Q_HEADS} q heads / {KV_HEADS} kv heads, head_dim {HEAD_DIM}, rotary_dim {ROTARY_DIM}, "
          f"block_size {BLOCK}, bf16; GQA by {'enable_gqa' if chain.gqa else 'repeat_interleave'}; "
          f"{args.reps} reps; one CUDA graph of all layers")
    results = []
    for name, backend in sdpa_backends():
        try:
            us, n = measure(torch, chain, backend, args.layers, args.reps)
        except Exception as e:  # noqa: BLE001 - the backend refuses the shape or the capture
            torch.cuda.synchronize()
            reason = str(e).splitlines()[0] if str(e) else type(e).__name__
            results.append({"sdpa": name, "skipped": reason[:300]})
            continue
        results.append({"sdpa": name, "us_per_layer": us, "replays_per_sample": n})
        torch.cuda.empty_cache()
    measured = [r for r in results if "us_per_layer" in r]
    print(f"{'sdpa':<22} {'us/layer':>10} {'min':>10} {'max':>10} {'replays':>8}")
    for r in results:
        if "skipped" in r:
            print(f"{r['sdpa']:<22} skipped: {r['skipped']}")
        else:
            u = r["us_per_layer"]
            print(f"{r['sdpa']:<22} {u['median']:>10.3f} {u['min']:>10.3f} {u['max']:>10.3f} "
                  f"{r['replays_per_sample']:>8}")
    best = min(measured, key=lambda r: r["us_per_layer"]["median"]) if measured else None
    if best:
        print(f"fastest: {best['sdpa']}, {best['us_per_layer']['median']:.3f} us per layer")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"bench": "decode_layer_torch", "device": device, "date": date,
                       "torch": torch.__version__, "seed": args.seed, "reps": args.reps,
                       "shape": {"layers": args.layers, "batch": args.batch,
                                 "context": args.context, "num_q_heads": Q_HEADS,
                                 "num_kv_heads": KV_HEADS, "head_dim": HEAD_DIM,
                                 "rotary_dim": ROTARY_DIM, "block_size": BLOCK,
                                 "dtype": "bf16"},
                       "gqa": "enable_gqa" if chain.gqa else "repeat_interleave",
                       "results": results, "best": best["sdpa"] if best else None}, f, indent=1)
    if not best:
        print("decode_layer_torch: no SDPA backend ran the chain", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
