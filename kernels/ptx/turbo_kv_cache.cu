// turbo_kv_cache: writes into a TurboQuant cache (K raw BF16, V 2/3/4-bit
// Lloyd-Max with an FP8 E4M3 scale per 16 values) and the normalized
// Walsh-Hadamard rotation that V goes through before it. Format and contracts
// in docs/kernels.md ("TurboQuant V cache", "Module turbo_kv_cache").
//
// A write is one CTA per token: its threads copy the token's K row with
// 16-byte accesses, and each thread quantizes whole 16-value groups of its V
// row (contract::quantize_group, the reference's code), so the packed bytes
// and scales are bit for bit the cpu backend's.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "sparkrt/contract/turbo_kv_cache.h"

namespace {

namespace contract = sparkrt::contract::turbo_kv_cache;
constexpr uint32_t kThreads = contract::kThreads;
constexpr uint32_t kGroup = contract::kGroup;

template <uint32_t kBits>
__device__ __forceinline__ void write_token(
    const __nv_bfloat16* __restrict__ key, const __nv_bfloat16* __restrict__ value,
    uint8_t* __restrict__ k_cache, uint8_t* __restrict__ v_cache,
    const int64_t* __restrict__ slot_mapping, uint32_t num_kv_heads, uint32_t head_dim,
    uint32_t block_size, uint32_t key_stride, uint32_t value_stride, uint64_t k_block_stride_bytes,
    uint64_t v_block_stride_bytes, uint64_t v_data_section_bytes) {
  if (head_dim == 0 || head_dim % kGroup != 0 || block_size == 0) return;
  const uint32_t t = blockIdx.x;
  const int64_t slot = slot_mapping[t];
  if (slot < 0) return;
  const uint64_t block = uint64_t(slot) / block_size, off = uint64_t(slot) % block_size;
  const uint32_t row = num_kv_heads * head_dim;

  // K: the raw row, 16 bytes at a time where both ends allow it.
  const __nv_bfloat16* k_src = key + uint64_t{t} * key_stride;
  uint8_t* k_dst = k_cache + block * k_block_stride_bytes + off * row * 2;
  if (((reinterpret_cast<uintptr_t>(k_src) | reinterpret_cast<uintptr_t>(k_dst)) % 16) == 0 &&
      row % 8 == 0) {
    const uint4* s = reinterpret_cast<const uint4*>(k_src);
    uint4* d = reinterpret_cast<uint4*>(k_dst);
    for (uint32_t i = threadIdx.x; i < row / 8; i += kThreads) d[i] = __ldg(s + i);
  } else {
    __nv_bfloat16* d = reinterpret_cast<__nv_bfloat16*>(k_dst);
    for (uint32_t i = threadIdx.x; i < row; i += kThreads) d[i] = k_src[i];
  }

  // V: one group of 16 per thread and pass.
  const __nv_bfloat16* v_src = value + uint64_t{t} * value_stride;
  uint8_t* v_block = v_cache + block * v_block_stride_bytes;
  uint8_t* data = v_block + off * (uint64_t{row} * kBits / 8);
  __nv_fp8_storage_t* scales =
      reinterpret_cast<__nv_fp8_storage_t*>(v_block + v_data_section_bytes + off * (row / kGroup));
  for (uint32_t g = threadIdx.x; g < row / kGroup; g += kThreads) {
    float x[kGroup];
#pragma unroll
    for (uint32_t i = 0; i < kGroup; ++i) x[i] = __bfloat162float(v_src[g * kGroup + i]);
    uint8_t idx[kGroup];
    const float s = contract::quantize_group(x, kBits, idx);
    uint8_t packed[kGroup * kBits / 8];
    contract::pack_group(idx, kBits, packed);
#pragma unroll
    for (uint32_t b = 0; b < kGroup * kBits / 8; ++b) data[g * (kGroup * kBits / 8) + b] = packed[b];
    scales[g] = __nv_cvt_float_to_fp8(s, __NV_SATFINITE, __NV_E4M3);
  }
}

}  // namespace

// Writes token blockIdx.x's K row raw and its V row quantized into its slot
// (a negative slot skips the token). Grid (num_tokens), block 256.
#define SPARKRT_TURBO_WRITE(bits)                                                                \
  extern "C" __global__ void __launch_bounds__(kThreads)                                        \
      reshape_and_cache_flash_bf16k_turbo##bits##v(                                              \
          const __nv_bfloat16* __restrict__ key, const __nv_bfloat16* __restrict__ value,        \
          uint8_t* __restrict__ k_cache, uint8_t* __restrict__ v_cache,                          \
          const int64_t* __restrict__ slot_mapping, uint32_t num_kv_heads, uint32_t head_dim,    \
          uint32_t block_size, uint32_t key_stride, uint32_t value_stride,                       \
          uint64_t k_block_stride_bytes, uint64_t v_block_stride_bytes,                          \
          uint64_t v_data_section_bytes) {                                                       \
    write_token<bits>(key, value, k_cache, v_cache, slot_mapping, num_kv_heads, head_dim,        \
                      block_size, key_stride, value_stride, k_block_stride_bytes,                \
                      v_block_stride_bytes, v_data_section_bytes);                               \
  }
SPARKRT_TURBO_WRITE(2)
SPARKRT_TURBO_WRITE(3)
SPARKRT_TURBO_WRITE(4)
#undef SPARKRT_TURBO_WRITE

// out[t][h] = H x[t][h] / sqrt(head_dim) for head h = blockIdx.y of token
// t = blockIdx.x: the normalized Walsh-Hadamard transform (Sylvester order),
// which is its own inverse. In f32, butterflies of stride 1, 2, 4, ..., then
// one multiply by 1 / sqrt(head_dim) and one bf16 rounding. `in` may equal
// `out`. Grid (num_tokens, num_heads), block 256.
extern "C" __global__ void __launch_bounds__(kThreads)
    hadamard_transform_bf16(const __nv_bfloat16* in, __nv_bfloat16* out, uint32_t head_dim,
                            uint32_t in_stride, uint32_t out_stride) {
  __shared__ float x[contract::kMaxRotationDim];
  const uint32_t d = head_dim;
  if (d < contract::kMinRotationDim || d > contract::kMaxRotationDim || (d & (d - 1)) != 0) return;
  const __nv_bfloat16* src = in + uint64_t{blockIdx.x} * in_stride + uint64_t{blockIdx.y} * d;
  for (uint32_t i = threadIdx.x; i < d; i += kThreads) x[i] = __bfloat162float(src[i]);
  __syncthreads();
  for (uint32_t h = 1; h < d; h *= 2) {
    for (uint32_t p = threadIdx.x; p < d / 2; p += kThreads) {
      const uint32_t i = (p / h) * 2 * h + p % h;
      const float a = x[i], b = x[i + h];
      x[i] = a + b;
      x[i + h] = a - b;
    }
    __syncthreads();
  }
  const float scale = __fdiv_rn(1.0f, __fsqrt_rn(float(d)));
  __nv_bfloat16* dst = out + uint64_t{blockIdx.x} * out_stride + uint64_t{blockIdx.y} * d;
  for (uint32_t i = threadIdx.x; i < d; i += kThreads) dst[i] = __float2bfloat16_rn(x[i] * scale);
}
