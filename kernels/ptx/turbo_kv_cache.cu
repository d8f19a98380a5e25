// turbo_kv_cache: writes into a TurboQuant cache (K raw BF16, V 2/3/4-bit
// Lloyd-Max with an FP8 E4M3 scale per 16 values) and the normalized
// Walsh-Hadamard rotation that V goes through before it. Format and contracts
// in docs/kernels.md ("TurboQuant V cache", "Module turbo_kv_cache").
//
// A write is one CTA per token: its threads copy the token's K row with
// 16-byte accesses, and each 4 threads quantize one 16-value group of its V
// row with the contract's steps (the reference's code, the sums chained
// through the 4 lanes in index order), so the packed bytes and scales are bit
// for bit the cpu backend's.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "sparkrt/contract/turbo_kv_cache.h"

namespace {

namespace contract = sparkrt::contract::turbo_kv_cache;
constexpr uint32_t kThreads = contract::kThreads;
constexpr uint32_t kGroup = contract::kGroup;
constexpr uint32_t kPerLane = 4;                       // V values a thread quantizes
constexpr uint32_t kQuads = kThreads / (kGroup / kPerLane);  // groups a CTA pass takes
constexpr uint32_t kFull = 0xffffffffu;

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

  // V: a group of 16 per 4 consecutive threads (a quad), 4 values each; the
  // quads of the CTA take groups q, q + 64, ... in uniform passes, so the
  // shuffles always run with every lane.
  const __nv_bfloat16* v_src = value + uint64_t{t} * value_stride;
  uint8_t* v_block = v_cache + block * v_block_stride_bytes;
  uint8_t* data = v_block + off * (uint64_t{row} * kBits / 8);
  __nv_fp8_storage_t* scales =
      reinterpret_cast<__nv_fp8_storage_t*>(v_block + v_data_section_bytes + off * (row / kGroup));
  const uint32_t groups = row / kGroup, lane = threadIdx.x % 32, sub = lane % kPerLane;
  const uint32_t quad0 = lane - sub;  // the quad's first lane
  for (uint32_t base = 0; base < groups; base += kQuads) {
    const uint32_t g = base + threadIdx.x / kPerLane;
    const bool on = g < groups;
    float x[kPerLane];
    float absmax = 0.0f;
#pragma unroll
    for (uint32_t i = 0; i < kPerLane; ++i) {
      x[i] = on ? __bfloat162float(v_src[g * kGroup + sub * kPerLane + i]) : 0.0f;
      absmax = fmaxf(absmax, fabsf(x[i]));
    }
    absmax = fmaxf(absmax, __shfl_xor_sync(kFull, absmax, 1));
    absmax = fmaxf(absmax, __shfl_xor_sync(kFull, absmax, 2));
    uint32_t field = 0;  // this lane's indices, kBits each, value 0 lowest
    float c[kPerLane];
#pragma unroll
    for (uint32_t i = 0; i < kPerLane; ++i) {
      const uint32_t k = contract::nearest_index(kBits, contract::scaled_value(kBits, x[i], absmax));
      field |= k << (i * kBits);
      c[i] = contract::centroid(kBits, k);
    }
    // The sums of squares in index order: each lane continues the chain of
    // the lanes before it.
    float x2 = 0.0f, c2 = 0.0f;
#pragma unroll
    for (uint32_t from = 0; from < kPerLane; ++from) {
      if (sub == from) {
#pragma unroll
        for (uint32_t i = 0; i < kPerLane; ++i) {
          x2 = contract::fma_step(x[i], x[i], x2);
          c2 = contract::fma_step(c[i], c[i], c2);
        }
      }
      x2 = __shfl_sync(kFull, x2, quad0 + from);
      c2 = __shfl_sync(kFull, c2, quad0 + from);
    }
    // The group's stream: the lanes' fields in order.
    uint64_t packed = field;
#pragma unroll
    for (uint32_t from = 1; from < kPerLane; ++from)
      packed |= uint64_t{__shfl_sync(kFull, field, quad0 + from)} << (from * kPerLane * kBits);
    if (on && sub == 0) {
      uint8_t* dst = data + g * (kGroup * kBits / 8);
#pragma unroll
      for (uint32_t b = 0; b < kGroup * kBits / 8; ++b) dst[b] = uint8_t(packed >> (8 * b));
      scales[g] = __nv_cvt_float_to_fp8(contract::group_scale(kBits, x2, c2, absmax),
                                        __NV_SATFINITE, __NV_E4M3);
    }
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
