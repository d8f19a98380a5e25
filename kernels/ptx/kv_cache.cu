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
  const int64_t slot = slot_mapping[blockIdx.x];
  if (slot < 0) return;
  (void)block_size;
  const uint32_t row = num_kv_heads * head_dim;
  const __nv_bfloat16* v = value + uint64_t{blockIdx.x} * value_stride;
  __nv_bfloat16* vd = v_cache + uint64_t(slot) * row;
  copy_row_bf16(v, vd, row, row % 8 == 0 && aligned(v, 16) && aligned(vd, 16));
}

// k_cache = fp8_sat(key / k_scale), v_cache = fp8_sat(value / v_scale), with
// cache_stride elements per block. As above, the loads do not wait for the slot.
extern "C" __global__ void __launch_bounds__(kCopyThreads) reshape_and_cache_fp8(
    const __nv_bfloat16* __restrict__ key, const __nv_bfloat16* __restrict__ value,
    __nv_fp8_storage_t* __restrict__ k_cache, __nv_fp8_storage_t* __restrict__ v_cache,
    const int64_t* __restrict__ slot_mapping, uint32_t num_kv_heads, uint32_t head_dim,
    uint32_t block_size, float k_scale, float v_scale, uint32_t key_stride,
    uint32_t value_stride, uint64_t cache_stride) {
  const int64_t slot = slot_mapping[blockIdx.x];
  const uint32_t row = num_kv_heads * head_dim;
  const __nv_bfloat16* k = key + uint64_t{blockIdx.x} * key_stride;
  const __nv_bfloat16* v = value + uint64_t{blockIdx.x} * value_stride;
  const bool vector_ok = row % 8 == 0 && cache_stride % 8 == 0 && aligned(k, 16) &&
                         aligned(v, 16) && aligned(k_cache, 8) && aligned(v_cache, 8);
  const uint64_t dst = slot < 0 ? 0
                                : uint64_t(slot) / block_size * cache_stride +
                                      uint64_t(slot) % block_size * row;
  __nv_fp8_storage_t* kd = k_cache + dst;
  __nv_fp8_storage_t* vd = v_cache + dst;
  if (vector_ok) {
    const uint32_t nv = row / 8;
    for (uint32_t i = threadIdx.x; i < nv; i += kCopyThreads) {
      const uint4 a = __ldg(reinterpret_cast<const uint4*>(k) + i);
      const uint4 b = __ldg(reinterpret_cast<const uint4*>(v) + i);
      if (slot < 0) continue;
      float fa[8], fb[8];
      bf16x8_to_float(a, fa);
      bf16x8_to_float(b, fb);
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        fa[j] = fa[j] / k_scale;  // IEEE division: the contract divides
        fb[j] = fb[j] / v_scale;
      }
      reinterpret_cast<uint2*>(kd)[i] = float8_to_fp8x8(fa);
      reinterpret_cast<uint2*>(vd)[i] = float8_to_fp8x8(fb);
    }
  } else if (slot >= 0) {
    for (uint32_t i = threadIdx.x; i < row; i += kCopyThreads) {
      kd[i] = __nv_cvt_float_to_fp8(__bfloat162float(k[i]) / k_scale, __NV_SATFINITE, __NV_E4M3);
      vd[i] = __nv_cvt_float_to_fp8(__bfloat162float(v[i]) / v_scale, __NV_SATFINITE, __NV_E4M3);
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
