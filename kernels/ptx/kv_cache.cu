// kv_cache: writes into the paged KV cache (slot mappings, K/V copies in bf16
// and fp8, the fused K path RMSNorm -> RoPE -> cache). Contracts in
// docs/kernels.md ("Module kv_cache").
//
// The copies are bandwidth-bound: one CTA per token moves that token's K and V
// rows (contiguous in the NHD block layout) with 16-byte accesses, K and V
// interleaved so each thread has two independent loads in flight.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "sparkrt/contract/division.h"
#include "sparkrt/contract/kv_cache.h"
#include "sparkrt_kernel_utils.cuh"

using sparkrt_kernels::bf16x8_to_float;
using sparkrt_kernels::float8_to_fp8x8;

namespace {

constexpr uint32_t kCopyThreads = sparkrt::contract::kv_cache::kCopyThreads;

// Copies `n` elements of row `src` to `dst` with the CTA's threads.
// `vector_ok` says both are 16-byte aligned and n % 8 == 0.
__device__ __forceinline__ void copy_row_bf16(const __nv_bfloat16* __restrict__ src,
                                              __nv_bfloat16* __restrict__ dst, uint32_t n,
                                              bool vector_ok) {
  if (vector_ok) {
    const uint4* s = reinterpret_cast<const uint4*>(src);
    uint4* d = reinterpret_cast<uint4*>(dst);
    for (uint32_t i = threadIdx.x; i < n / 8; i += blockDim.x) d[i] = __ldg(s + i);
  } else {
    for (uint32_t i = threadIdx.x; i < n; i += blockDim.x) dst[i] = src[i];
  }
}

__device__ __forceinline__ bool aligned(const void* p, uintptr_t bytes) {
  return (reinterpret_cast<uintptr_t>(p) & (bytes - 1)) == 0;
}

}  // namespace

// slots[i] = block_table[(start_pos + i) / block_size] * block_size
//            + (start_pos + i) % block_size, for i < count.
extern "C" __global__ void fill_slots_from_block_table(int64_t* __restrict__ slots,
                                                       const int32_t* __restrict__ block_table,
                                                       uint32_t start_pos, uint32_t count,
                                                       uint32_t block_size) {
  sparkrt_kernels::dependent_launch_sync();
  const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= count) return;
  const uint32_t pos = start_pos + i;
  slots[i] = int64_t{block_table[pos / block_size]} * block_size + pos % block_size;
}

// Copies token blockIdx.x's key and value rows into its slot of both caches.
// The row loads do not wait for the slot: they are issued while the slot
// mapping is still in flight, and only the stores depend on it.
extern "C" __global__ void __launch_bounds__(kCopyThreads) reshape_and_cache(
    const __nv_bfloat16* __restrict__ key, const __nv_bfloat16* __restrict__ value,
    __nv_bfloat16* __restrict__ k_cache, __nv_bfloat16* __restrict__ v_cache,
    const int64_t* __restrict__ slot_mapping, uint32_t num_kv_heads, uint32_t head_dim,
    uint32_t block_size, uint32_t key_stride, uint32_t value_stride) {
  sparkrt_kernels::dependent_launch_sync();
  const int64_t slot = slot_mapping[blockIdx.x];
  (void)block_size;  // the unpadded NHD layout puts slot s at s * row for any block size
  const uint32_t row = num_kv_heads * head_dim;
  const __nv_bfloat16* k = key + uint64_t{blockIdx.x} * key_stride;
  const __nv_bfloat16* v = value + uint64_t{blockIdx.x} * value_stride;
  // slot * row keeps 16-byte alignment whenever row % 8 == 0.
  const bool vector_ok = row % 8 == 0 && aligned(k, 16) && aligned(v, 16) &&
                         aligned(k_cache, 16) && aligned(v_cache, 16);
  if (vector_ok) {
    const uint32_t nv = row / 8;
    const uint4* ks = reinterpret_cast<const uint4*>(k);
    const uint4* vs = reinterpret_cast<const uint4*>(v);
    uint4* kd = reinterpret_cast<uint4*>(k_cache + uint64_t(slot) * row);
    uint4* vd = reinterpret_cast<uint4*>(v_cache + uint64_t(slot) * row);
    for (uint32_t i = threadIdx.x; i < nv; i += kCopyThreads) {
      const uint4 a = __ldg(ks + i);
      const uint4 b = __ldg(vs + i);
      if (slot >= 0) {
        kd[i] = a;
        vd[i] = b;
      }
    }
  } else if (slot >= 0) {
    copy_row_bf16(k, k_cache + uint64_t(slot) * row, row, false);
    copy_row_bf16(v, v_cache + uint64_t(slot) * row, row, false);
  }
}

// The value half of reshape_and_cache.
extern "C" __global__ void __launch_bounds__(kCopyThreads) reshape_and_cache_flash_v_only(
    const __nv_bfloat16* __restrict__ value, __nv_bfloat16* __restrict__ v_cache,
    const int64_t* __restrict__ slot_mapping, uint32_t num_kv_heads, uint32_t head_dim,
    uint32_t block_size, uint32_t value_stride) {
  sparkrt_kernels::dependent_launch_sync();
  const int64_t slot = slot_mapping[blockIdx.x];
  if (slot < 0) return;
  (void)block_size;
  const uint32_t row = num_kv_heads * head_dim;
  const __nv_bfloat16* v = value + uint64_t{blockIdx.x} * value_stride;
  __nv_bfloat16* vd = v_cache + uint64_t(slot) * row;
  copy_row_bf16(v, vd, row, row % 8 == 0 && aligned(v, 16) && aligned(vd, 16));
}

namespace {

namespace contract = sparkrt::contract;

// E4M3 of eight bf16 (a 16-byte unit) divided by d, with saturation, where
// all eight take contract::divide's reciprocal path (always, for scales and
// values of sane size): one product and two fused multiply-adds a value.
// Returns false, storing nothing, where one does not.
__device__ __forceinline__ bool store_fp8_quotients(uint2* dst, const uint4& w,
                                                    const contract::Divisor& d) {
  float f[8];
  bf16x8_to_float(w, f);
  bool fast = true;
#pragma unroll
  for (int j = 0; j < 8; ++j) fast &= contract::reciprocal_path(d, f[j]);
  if (!fast) return false;
#pragma unroll
  for (int j = 0; j < 8; ++j) f[j] = contract::reciprocal_quotient(d, f[j]);
  *dst = float8_to_fp8x8(f);
  return true;
}

// The same unit value by value with contract::divide, read again from src:
// the rare form, run after the common one so that its IEEE divisions find
// few registers live.
__device__ __forceinline__ void store_fp8_divided(uint2* dst, const uint4* src,
                                                  const contract::Divisor& d) {
  const uint4 w = __ldg(src);
  uint64_t lo = w.x | uint64_t{w.y} << 32, hi = w.z | uint64_t{w.w} << 32, out = 0;
#pragma unroll 1
  for (int j = 0; j < 8; ++j) {  // value j in the low 16 bits of lo; byte j enters at the top
    const float q = contract::divide(d, __uint_as_float(uint32_t(lo) << 16));
    out = out >> 8 | uint64_t{__nv_cvt_float_to_fp8(q, __NV_SATFINITE, __NV_E4M3)} << 56;
    lo = lo >> 16 | hi << 48;
    hi >>= 16;
  }
  *dst = make_uint2(uint32_t(out), uint32_t(out >> 32));
}

// Where slot s starts in a pool of cache_stride elements a block:
// s / block_size * cache_stride + s % block_size * row, which is s * row plus
// the padding of the blocks before it, so a dense pool needs no division.
__device__ __forceinline__ uint64_t fp8_slot_offset(uint64_t s, uint32_t block_size, uint32_t row,
                                                    uint64_t cache_stride) {
  const uint64_t pad = cache_stride - uint64_t{block_size} * row;  // the identity holds mod 2^64
  return s * row + (pad != 0 ? s / block_size * pad : 0);
}

}  // namespace

// k_cache = fp8_sat(key / k_scale), v_cache = fp8_sat(value / v_scale), with
// cache_stride elements per block. The quotients are IEEE divisions, bit for
// bit, through contract::divide (sparkrt/contract/division.h): each scale's
// reciprocal once, then a product and two fused multiply-adds per value.
// The rows are 16-byte units, K's then V's (a row of 1024 values: 256, one
// a thread); thread t takes units t and t + 256 of each pass of 512, and
// the first pass's loads are issued before the slot is known.
extern "C" __global__ void __launch_bounds__(kCopyThreads) reshape_and_cache_fp8(
    const __nv_bfloat16* __restrict__ key, const __nv_bfloat16* __restrict__ value,
    __nv_fp8_storage_t* __restrict__ k_cache, __nv_fp8_storage_t* __restrict__ v_cache,
    const int64_t* __restrict__ slot_mapping, uint32_t num_kv_heads, uint32_t head_dim,
    uint32_t block_size, float k_scale, float v_scale, uint32_t key_stride,
    uint32_t value_stride, uint64_t cache_stride) {
  sparkrt_kernels::dependent_launch_sync();
  const int64_t slot = slot_mapping[blockIdx.x];
  const uint32_t row = num_kv_heads * head_dim;
  const __nv_bfloat16* k = key + uint64_t{blockIdx.x} * key_stride;
  const __nv_bfloat16* v = value + uint64_t{blockIdx.x} * value_stride;
  const bool vector_ok = row % 8 == 0 && cache_stride % 8 == 0 && aligned(k, 16) &&
                         aligned(v, 16) && aligned(k_cache, 8) && aligned(v_cache, 8);
  if (vector_ok) {
    const uint32_t nv = row / 8, units = 2 * nv;  // K's units, then V's
    auto src = [&](uint32_t u) {
      return reinterpret_cast<const uint4*>(u < nv ? k : v) + (u < nv ? u : u - nv);
    };
    auto load = [&](uint32_t u) { return u < units ? __ldg(src(u)) : uint4{}; };
    constexpr uint32_t kPass = 2 * kCopyThreads;  // units a pass: two a thread
    const uint32_t t = threadIdx.x;
    uint4 a = load(t), b = load(t + kCopyThreads);
    if (slot < 0) return;
    const uint64_t dst = fp8_slot_offset(uint64_t(slot), block_size, row, cache_stride);
    auto out = [&](uint32_t u) {
      return reinterpret_cast<uint2*>((u < nv ? k_cache : v_cache) + dst) + (u < nv ? u : u - nv);
    };
    auto divisor = [&](uint32_t u) { return contract::make_divisor(u < nv ? k_scale : v_scale); };
    for (uint32_t base = 0;;) {
      const uint32_t u0 = base + t, u1 = u0 + kCopyThreads;
      const bool redo0 = u0 < units && !store_fp8_quotients(out(u0), a, divisor(u0));
      const bool redo1 = u1 < units && !store_fp8_quotients(out(u1), b, divisor(u1));
      if (redo0) store_fp8_divided(out(u0), src(u0), divisor(u0));
      if (redo1) store_fp8_divided(out(u1), src(u1), divisor(u1));
      base += kPass;
      if (base >= units) break;
      a = load(base + t);
      b = load(base + t + kCopyThreads);
    }
  } else if (slot >= 0) {
    const uint64_t dst = fp8_slot_offset(uint64_t(slot), block_size, row, cache_stride);
    const contract::Divisor dk = contract::make_divisor(k_scale);
    const contract::Divisor dv = contract::make_divisor(v_scale);
    for (uint32_t i = threadIdx.x; i < row; i += kCopyThreads) {
      k_cache[dst + i] = __nv_cvt_float_to_fp8(contract::divide(dk, __bfloat162float(k[i])),
                                               __NV_SATFINITE, __NV_E4M3);
      v_cache[dst + i] = __nv_cvt_float_to_fp8(contract::divide(dv, __bfloat162float(v[i])),
                                               __NV_SATFINITE, __NV_E4M3);
    }
  }
}

namespace {

// Sum over the CTA (blockDim.x <= 1024). Every thread gets the total.
__device__ __forceinline__ float block_sum(float x, float* scratch /* [32] */) {
#pragma unroll
  for (int m = 16; m > 0; m >>= 1) x += __shfl_xor_sync(0xffffffffu, x, m);
  const uint32_t warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const uint32_t warps = (blockDim.x + 31) / 32;
  if (lane == 0) scratch[warp] = x;
  __syncthreads();
  float total = 0.f;
  for (uint32_t w = 0; w < warps; ++w) total += scratch[w];  // same order in every thread
  return total;
}

// RMSNorm then rotate-half RoPE of one head row, in f32; returns element d.
// Block: one thread per element (head_dim threads). `pos_of(i)` gives the
// position for rotary pair i.
template <typename PosFn>
__device__ __forceinline__ float norm_rope(const __nv_bfloat16* __restrict__ k_row,
                                           const __nv_bfloat16* __restrict__ weight,
                                           uint32_t head_dim, uint32_t rotary_dim, float rms_eps,
                                           float theta, PosFn pos_of) {
  __shared__ float scratch[32];
  __shared__ float y[1024];
  const uint32_t d = threadIdx.x;
  const float x = __bfloat162float(k_row[d]);
  const float ss = block_sum(x * x, scratch);
  const float denom = sqrtf(ss / float(head_dim) + rms_eps);
  const float yd = x * __bfloat162float(weight[d]) / denom;
  y[d] = yd;
  __syncthreads();
  if (d >= rotary_dim) return yd;
  const uint32_t half = rotary_dim / 2;
  const uint32_t i = d < half ? d : d - half;
  const float inv_freq = powf(theta, -float(2 * i) / float(rotary_dim));
  const float angle = float(pos_of(i)) * inv_freq;
  float s, c;
  sincosf(angle, &s, &c);
  return d < half ? yd * c - y[d + half] * s : yd * c + y[d - half] * s;
}

__device__ __forceinline__ bool fused_skip(const int64_t* slot_mapping, int64_t* slot) {
  *slot = slot_mapping[blockIdx.x];
  return *slot < 0;  // uniform over the CTA, so returning before the barriers is safe
}

}  // namespace

// Fused K path: cache = bf16(rope(rmsnorm(k_in))), rounded once.
// Grid (num_tokens, num_kv_heads), block head_dim.
extern "C" __global__ void fused_k_norm_rope_cache_write_bf16(
    const __nv_bfloat16* __restrict__ k_in, const __nv_bfloat16* __restrict__ k_norm_weight,
    const int32_t* __restrict__ positions, __nv_bfloat16* __restrict__ k_cache,
    const int64_t* __restrict__ slot_mapping, uint32_t num_kv_heads, uint32_t head_dim,
    uint32_t rotary_dim, uint32_t block_size, float rms_eps, float theta) {
  sparkrt_kernels::dependent_launch_sync();
  int64_t slot;
  if (fused_skip(slot_mapping, &slot)) return;
  (void)block_size;
  const uint32_t t = blockIdx.x, h = blockIdx.y;
  const int32_t pos = positions[t];
  const float r = norm_rope(k_in + (uint64_t{t} * num_kv_heads + h) * head_dim, k_norm_weight,
                            head_dim, rotary_dim, rms_eps, theta, [pos](uint32_t) { return pos; });
  k_cache[(uint64_t(slot) * num_kv_heads + h) * head_dim + threadIdx.x] = __float2bfloat16_rn(r);
}

// MRoPE: rotary pair i takes its position from (pos_t, pos_h, pos_w)[i % 3].
extern "C" __global__ void fused_k_norm_rope_cache_write_bf16_mrope(
    const __nv_bfloat16* __restrict__ k_in, const __nv_bfloat16* __restrict__ k_norm_weight,
    const int32_t* __restrict__ pos_t, const int32_t* __restrict__ pos_h,
    const int32_t* __restrict__ pos_w, __nv_bfloat16* __restrict__ k_cache,
    const int64_t* __restrict__ slot_mapping, uint32_t num_kv_heads, uint32_t head_dim,
    uint32_t rotary_dim, uint32_t block_size, float rms_eps, float theta) {
  sparkrt_kernels::dependent_launch_sync();
  int64_t slot;
  if (fused_skip(slot_mapping, &slot)) return;
  (void)block_size;
  const uint32_t t = blockIdx.x, h = blockIdx.y;
  const int32_t p3[3] = {pos_t[t], pos_h[t], pos_w[t]};
  const float r = norm_rope(k_in + (uint64_t{t} * num_kv_heads + h) * head_dim, k_norm_weight,
                            head_dim, rotary_dim, rms_eps, theta, [&p3](uint32_t i) {
                              const uint32_t k = i % 3;
                              return k == 0 ? p3[0] : (k == 1 ? p3[1] : p3[2]);
                            });
  k_cache[(uint64_t(slot) * num_kv_heads + h) * head_dim + threadIdx.x] = __float2bfloat16_rn(r);
}

// FP8 sibling: cache = fp8_sat(rope(rmsnorm(k_in)) * inv_scale), straight from f32.
extern "C" __global__ void fused_k_norm_rope_cache_write_fp8(
    const __nv_bfloat16* __restrict__ k_in, const __nv_bfloat16* __restrict__ k_norm_weight,
    const int32_t* __restrict__ positions, __nv_fp8_storage_t* __restrict__ k_cache,
    const int64_t* __restrict__ slot_mapping, uint32_t num_kv_heads, uint32_t head_dim,
    uint32_t rotary_dim, uint32_t block_size, float rms_eps, float theta, float inv_scale) {
  sparkrt_kernels::dependent_launch_sync();
  int64_t slot;
  if (fused_skip(slot_mapping, &slot)) return;
  (void)block_size;
  const uint32_t t = blockIdx.x, h = blockIdx.y;
  const int32_t pos = positions[t];
  const float r = norm_rope(k_in + (uint64_t{t} * num_kv_heads + h) * head_dim, k_norm_weight,
                            head_dim, rotary_dim, rms_eps, theta, [pos](uint32_t) { return pos; });
  k_cache[(uint64_t(slot) * num_kv_heads + h) * head_dim + threadIdx.x] =
      __nv_cvt_float_to_fp8(r * inv_scale, __NV_SATFINITE, __NV_E4M3);
}
