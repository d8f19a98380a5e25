#!/usr/bin/env python3
"""Compiles a few Triton kernels, runs each once through Triton's own launcher,
and writes what sparkrt needs to launch the same kernel on the same inputs:

  <out>/<module>.ptx            the PTX Triton generated (module = file stem)
  <out>/<module>.manifest       entry, grid, block, shared memory, arguments
  <out>/<module>.<buffer>.bin   inputs, and Triton's outputs to compare with

The GPU test `gpu.triton_interop` (tests/gpu/triton_interop_test.cc) runs
this script, loads each module through SPARKRT_KERNEL_PATH, launches it with
KernelLaunch and requires its outputs to equal Triton's bit for bit.

  python3 tools/gpu/triton_export.py --out DIR

Manifest lines (one per item, fields separated by spaces):
  entry NAME | grid X Y Z | block X Y Z | shared BYTES
  input NAME FILE           a device buffer filled from FILE
  output NAME INIT EXPECT   a device buffer filled from INIT (the poison
                            Triton's launch started from too), whose contents
                            must equal EXPECT afterwards
  arg ptr NAME | arg null | arg u32 V | arg s32 V | arg u64 V | arg s64 V
  arg f32 BITS              (the float's IEEE bits, hex)
"""
import argparse
import re
import struct
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x * y + x, mask=mask)


@triton.jit
def softmax_kernel(out_ptr, in_ptr, in_row_stride, out_row_stride, n_cols, inv_temp,
                   BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(in_ptr + row * in_row_stride + cols, mask=mask, other=-float("inf"))
    x = x.to(tl.float32) * inv_temp
    x = x - tl.max(x, axis=0)
    e = tl.exp(x)
    tl.store(out_ptr + row * out_row_stride + cols, e / tl.sum(e, axis=0), mask=mask)


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_bk, stride_cm,
                  BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * stride_am + (k + rk)[None, :],
                    mask=(rm[:, None] < M) & ((k + rk)[None, :] < K), other=0.0)
        b = tl.load(b_ptr + (k + rk)[:, None] * stride_bk + rn[None, :],
                    mask=((k + rk)[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :], acc,
             mask=(rm[:, None] < M) & (rn[None, :] < N))


def entry_params(ptx, entry):
    m = re.search(r"\.entry\s+" + re.escape(entry) + r"\s*\((.*?)\)", ptx, re.S)
    if not m:
        sys.exit(f"no .entry {entry} in the PTX")
    return m.group(1).count(".param")


class Export:
    def __init__(self, out, module):
        self.out, self.module = out, module
        self.lines, self.outputs, self.args = [], [], []

    def buffer_file(self, name, tensor):
        path = self.out / f"{self.module}.{name}.bin"
        path.write_bytes(tensor.contiguous().cpu().view(torch.uint8).numpy().tobytes())
        return path.name

    def input(self, name, tensor):
        self.lines.append(f"input {name} {self.buffer_file(name, tensor)}")
        self.args.append(f"arg ptr {name}")

    def output(self, name, tensor):
        """Registers an output before the launch: its poison is saved now."""
        self.outputs.append((name, tensor, self.buffer_file(name + ".init", tensor)))
        self.args.append(f"arg ptr {name}")

    def scalar(self, kind, value):
        if kind == "f32":
            value = "0x%08x" % struct.unpack("<I", struct.pack("<f", value))[0]
        self.args.append(f"arg {kind} {value}")

    def write(self, compiled, grid):
        ptx = compiled.asm["ptx"]
        name = compiled.metadata.name
        (self.out / f"{self.module}.ptx").write_text(ptx)
        declared = entry_params(ptx, name)
        if declared < len(self.args):
            sys.exit(f"{name}: {declared} parameters in the PTX, {len(self.args)} arguments given")
        # Triton appends scratch pointers it does not use here: pass null.
        args = self.args + ["arg null"] * (declared - len(self.args))
        head = [f"entry {name}", "grid %d %d %d" % tuple(list(grid) + [1] * (3 - len(grid))),
                f"block {32 * compiled.metadata.num_warps} 1 1",
                f"shared {compiled.metadata.shared}"]
        outs = [f"output {n} {init} {self.buffer_file(n, t)}" for n, t, init in self.outputs]
        (self.out / f"{self.module}.manifest").write_text("\n".join(head + self.lines + outs + args) + "\n")
        print(f"{self.module}: {name}, {declared} parameters, grid {grid}, "
              f"{compiled.metadata.num_warps} warps, {compiled.metadata.shared} B shared")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--seed", type=int, default=20261201)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(args.seed)
    dev = "cuda"

    # Elementwise, n off the block grid: the u32 sits between pointers.
    n = 100003
    x = torch.randn(n, device=dev)
    y = torch.randn(n, device=dev)
    out = torch.full((n,), float("nan"), device=dev)
    e = Export(args.out, "triton_add")
    e.input("x", x)
    e.input("y", y)
    e.output("out", out)
    e.scalar("u32", n)
    grid = (triton.cdiv(n, 1024),)
    k = add_kernel[grid](x, y, out, n, BLOCK=1024)
    torch.cuda.synchronize()
    e.write(k, grid)

    # Row softmax: fp16 in, fp32 out, an f32 scalar among the u32s.
    rows, cols = 37, 781
    inp = torch.randn(rows, 800, device=dev, dtype=torch.float16)
    sm = torch.full((rows, 784), float("nan"), device=dev)
    e = Export(args.out, "triton_softmax")
    e.output("out", sm)
    e.input("in", inp)
    for v in (inp.stride(0), sm.stride(0), cols):
        e.scalar("u32", v)
    e.scalar("f32", 0.73)
    k = softmax_kernel[(rows,)](sm, inp, inp.stride(0), sm.stride(0), cols, 0.73, BLOCK=1024)
    torch.cuda.synchronize()
    e.write(k, (rows,))

    # bf16 matmul with tl.dot: shared memory and tensor cores.
    M, N, K = 200, 136, 96
    a = torch.randn(M, K, device=dev, dtype=torch.bfloat16)
    b = torch.randn(K, N, device=dev, dtype=torch.bfloat16)
    c = torch.full((M, N), float("nan"), device=dev)
    e = Export(args.out, "triton_matmul")
    e.input("a", a)
    e.input("b", b)
    e.output("c", c)
    for v in (M, N, K, a.stride(0), b.stride(0), c.stride(0)):
        e.scalar("u32", v)
    grid = (triton.cdiv(M, 64), triton.cdiv(N, 64))
    k = matmul_kernel[grid](a, b, c, M, N, K, a.stride(0), b.stride(0), c.stride(0),
                            BM=64, BN=64, BK=32)
    torch.cuda.synchronize()
    e.write(k, grid)


if __name__ == "__main__":
    main()
