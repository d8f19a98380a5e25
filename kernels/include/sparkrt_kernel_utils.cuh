// Small device helpers shared by the kernel modules: bf16/fp8 vector
// conversions and packing, cache hints, cp.async, tensor-core products, shared
// loads and block-size division. Header-only; included by kernels/ptx/*.cu.
#ifndef SPARKRT_KERNELS_INCLUDE_SPARKRT_KERNEL_UTILS_CUH_
#define SPARKRT_KERNELS_INCLUDE_SPARKRT_KERNEL_UTILS_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

namespace sparkrt_kernels {

// Programmatic dependent launch (sm_90 and later). A kernel launched with
// KernelLaunch::dependent_launch() may be started while the kernel before it
// on its stream still runs. This waits until that kernel has finished and its
// writes are visible, then lets the next dependent kernel start. It comes
// first in every entry an op may launch dependent, before any access to
// global memory, so such a launch computes exactly what a plain one does; only
// its start overlaps the previous kernel's tail. Without a dependent launch,
// and when compiled for an architecture below sm_90, it does nothing.
__device__ __forceinline__ void dependent_launch_sync() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Two f32 rounded (to nearest even) to bf16 or f16 and packed in a word,
// `lo` in the low half: the layout of an mma operand register.
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}
__device__ __forceinline__ uint32_t pack_f16(float lo, float hi) {
  const __half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// Two bf16 packed in a word (element 0 in the low half) to f32: a bf16 is the
// top half of an f32, so each is one shift or mask.
__device__ __forceinline__ void bf16x2_to_float(uint32_t w, float& lo, float& hi) {
  lo = __uint_as_float(w << 16);
  hi = __uint_as_float(w & 0xffff0000u);
}

__device__ __forceinline__ void bf16x8_to_float(const uint4& v, float (&f)[8]) {
  bf16x2_to_float(v.x, f[0], f[1]);
  bf16x2_to_float(v.y, f[2], f[3]);
  bf16x2_to_float(v.z, f[4], f[5]);
  bf16x2_to_float(v.w, f[6], f[7]);
}

// One E4M3 byte to f32 by moving its exponent and mantissa into an f32 and
// rescaling by 2^(127 - 7), which is exact for normals and subnormals alike;
// 0x7f/0xff are NaN.
__device__ __forceinline__ float fp8_to_float_bits(uint32_t b) {
  const float mag = __uint_as_float((b & 0x7fu) << 20) * 0x1p120f;
  const float v = (b & 0x80u) ? -mag : mag;
  return (b & 0x7fu) == 0x7fu ? __int_as_float(0x7fffffff) : v;
}

// Two E4M3 bytes (element 0 in the low byte) to two f16 packed in a word
// (element 0 in the low half); exact, since every E4M3 value is an f16.
__device__ __forceinline__ uint32_t fp8x2_to_half2_bits(uint32_t w16) {
  const __half2_raw h =
      __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(w16 & 0xffffu), __NV_E4M3);
  return uint32_t{h.x} | (uint32_t{h.y} << 16);
}

// Byte permute: result byte i is byte sel[4i+3:4i] of the eight bytes {b, a}
// (a is bytes 0-3).
__device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel) {
  uint32_t r;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(sel));
  return r;
}

// Eight f32 to E4M3, saturating to +-448, NaN kept, round to nearest even.
__device__ __forceinline__ uint2 float8_to_fp8x8(const float (&f)[8]) {
  uint32_t w[4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
    w[i] = __nv_cvt_float2_to_fp8x2(make_float2(f[2 * i], f[2 * i + 1]), __NV_SATFINITE, __NV_E4M3);
  return make_uint2(w[0] | (w[1] << 16), w[2] | (w[3] << 16));
}

// Streaming loads of data read once (K/V rows): no L1 allocation.
__device__ __forceinline__ uint4 load_stream(const uint4* p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}
__device__ __forceinline__ uint2 load_stream(const uint2* p) {
  uint2 v;
  asm("ld.global.nc.L1::no_allocate.v2.u32 {%0, %1}, [%2];"
               : "=r"(v.x), "=r"(v.y)
               : "l"(p));
  return v;
}

// Asks L2 to fetch the line holding p; no register, no wait.
__device__ __forceinline__ void prefetch_l2(const void* p) {
  asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}

// 16 bytes global -> shared without registers (sm_80+); src_bytes 0 writes
// zeros and reads nothing. The copy is complete once the thread waits for it
// (cp.async.wait_group or an mbarrier), and visible to other threads after a
// barrier.
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, uint32_t src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src),
               "r"(src_bytes));
}
__device__ __forceinline__ void cp_async16(void* dst, const void* src, uint32_t src_bytes) {
  cp_async16(static_cast<uint32_t>(__cvta_generic_to_shared(dst)), src, src_bytes);
}
// As cp_async16, under an L2 cache policy from createpolicy (for example
// evict_first_policy() for data read once).
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, uint32_t src_bytes,
                                           uint64_t policy) {
  asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2, %3;" ::"r"(dst),
               "l"(src), "r"(src_bytes), "l"(policy));
}
__device__ __forceinline__ void cp_async16(void* dst, const void* src, uint32_t src_bytes,
                                           uint64_t policy) {
  cp_async16(static_cast<uint32_t>(__cvta_generic_to_shared(dst)), src, src_bytes, policy);
}
// An L2 policy that evicts these lines first: a stream read once then keeps
// out of the way of code and small tables.
__device__ __forceinline__ uint64_t evict_first_policy() {
  uint64_t p;
  asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
  return p;
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;" ::: "memory");
}
// Waits until at most N of this thread's committed groups are pending.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

// The dynamic shared memory of this launch, in bytes.
__device__ __forceinline__ uint32_t dynamic_smem_bytes() {
  uint32_t v;
  asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(v));
  return v;
}

// Tensor-core products of one warp (mma.sync, sm_80+): d += A (16x16) *
// B (16x8), f32 accumulate; operands bf16 or f16 pairs.
template <bool F16>
__device__ __forceinline__ void mma_k16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                        uint32_t a3, uint32_t b0, uint32_t b1) {
  if constexpr (F16) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  } else {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
}
// d += A (16x8) * B (8x8).
template <bool F16>
__device__ __forceinline__ void mma_k8(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t b0) {
  if constexpr (F16) {
    asm("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5}, {%6}, "
        "{%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(b0));
  } else {
    asm("mma.sync.aligned.m16n8k8.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5}, {%6}, "
        "{%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(b0));
  }
}

// Shared-memory reads the compiler may not hoist out of a loop (operands a
// kernel keeps in shared memory to spare registers stay there).
__device__ __forceinline__ uint2 lds_u2(uint32_t addr) {
  uint2 v;
  asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "r"(addr));
  return v;
}
__device__ __forceinline__ uint4 lds_u4(uint32_t addr) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(addr));
  return v;
}
__device__ __forceinline__ uint4 lds(uint32_t addr, uint4*) { return lds_u4(addr); }
__device__ __forceinline__ uint2 lds(uint32_t addr, uint2*) { return lds_u2(addr); }

// 2^x for x <= 0 with subnormal results flushed to zero (the softmax
// weights, where those do not matter): one MUFU, without exp2f's range fix.
__device__ __forceinline__ float ex2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// x / d and x % d for a divisor fixed per launch (a cache block size):
// shifts for a power of two, the usual case, else the division.
struct BlockDiv {
  uint32_t d, shift;
  bool pow2;
  __device__ explicit BlockDiv(uint32_t divisor)
      : d(divisor), shift(__ffs(divisor) - 1), pow2((divisor & (divisor - 1)) == 0) {}
  __device__ __forceinline__ uint32_t div(uint32_t x) const { return pow2 ? x >> shift : x / d; }
  __device__ __forceinline__ uint32_t mod(uint32_t x) const {
    return pow2 ? x & (d - 1) : x % d;
  }
};

}  // namespace sparkrt_kernels

#endif  // SPARKRT_KERNELS_INCLUDE_SPARKRT_KERNEL_UTILS_CUH_
