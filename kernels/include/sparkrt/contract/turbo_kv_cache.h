// The TurboQuant V-cache format and the launch contract of kernel module
// `turbo_kv_cache` (kernels/ptx/turbo_kv_cache.cu): the cache writes of a
// BF16 K pool with a 2-, 3- or 4-bit Lloyd-Max V pool, and the Walsh-Hadamard
// rotation that V goes through first. The layout arithmetic and the group
// quantizer are written once here, for the CUDA source, the reference and the
// op wrappers (functions marked SPARKRT_HOST_DEVICE compile for both). C++17.
// Format and contracts in docs/kernels.md ("TurboQuant V cache").
#ifndef SPARKRT_CONTRACT_TURBO_KV_CACHE_H_
#define SPARKRT_CONTRACT_TURBO_KV_CACHE_H_

#include <cstdint>

#include "sparkrt/contract/host_device.h"

namespace sparkrt::contract::turbo_kv_cache {

inline constexpr char kModule[] = "turbo_kv_cache";

// Block of the cache writes (grid: num_tokens) and of the rotation (grid:
// (num_tokens, num_heads)).
inline constexpr uint32_t kThreads = 256;

// V values are quantized in groups of kGroup consecutive dims of one head,
// each with one FP8 E4M3 scale: head_dim is a multiple of kGroup.
inline constexpr uint32_t kGroup = 16;
// The rotation takes power-of-two head_dim in [kMinRotationDim, kMaxRotationDim].
inline constexpr uint32_t kMinRotationDim = 64;
inline constexpr uint32_t kMaxRotationDim = 512;
// The largest stored scale (E4M3's largest finite value).
inline constexpr float kMaxScale = 448.0f;

// Lloyd-Max centroids for N(0, 1), symmetric: the positive ones ascending,
// per bit width (2: 0.4528, 1.5104; 3: 0.2451 ... 2.1520; 4: 0.1284 ...
// 2.7326). Centroid i of 2^bits, ascending, is -positive(half - 1 - i) below
// half = 2^(bits - 1) and positive(i - half) from it. The decision bounds are
// the midpoints of neighbours.
SPARKRT_HOST_DEVICE constexpr float positive_centroid(uint32_t bits, uint32_t k) {
  if (bits == 2) return k == 0 ? 0.4528f : 1.5104f;
  if (bits == 3) return k == 0 ? 0.2451f : k == 1 ? 0.7560f : k == 2 ? 1.3440f : 2.1520f;
  return k == 0   ? 0.1284f
         : k == 1 ? 0.3880f
         : k == 2 ? 0.6568f
         : k == 3 ? 0.9423f
         : k == 4 ? 1.2562f
         : k == 5 ? 1.6180f
         : k == 6 ? 2.0690f
                  : 2.7326f;
}
SPARKRT_HOST_DEVICE constexpr bool valid_bits(uint32_t bits) { return bits >= 2 && bits <= 4; }
SPARKRT_HOST_DEVICE constexpr uint32_t codebook_size(uint32_t bits) { return 1u << bits; }
SPARKRT_HOST_DEVICE constexpr float centroid(uint32_t bits, uint32_t i) {
  const uint32_t half = codebook_size(bits) / 2;
  return i >= half ? positive_centroid(bits, i - half) : -positive_centroid(bits, half - 1 - i);
}
static_assert(centroid(4, 0) == -2.7326f && centroid(4, 15) == 2.7326f && centroid(3, 4) == 0.2451f);

// The layout of one cache block (docs/kernels.md, "TurboQuant V cache"). K:
// raw BF16 [block_size][num_kv_heads][head_dim]. V: a data section of
// block_size * num_kv_heads * head_dim * bits / 8 bytes, token-major (heads
// contiguous within a token), then a scale section of one E4M3 scale per
// group, token t's at data_section_bytes + t * (num_kv_heads * head_dim / 16).
struct Layout {
  uint64_t k_block_stride_bytes;  // the dense K block
  uint64_t v_data_section_bytes;
  uint64_t v_block_stride_bytes;  // data section + scale section
  uint64_t v_token_data_bytes;    // one token's packed values (all heads)
  uint64_t v_token_scale_bytes;   // one token's scales (all heads)
  uint64_t v_head_data_bytes;     // one head's packed values
};
// For valid_shape() arguments only.
SPARKRT_HOST_DEVICE constexpr Layout layout(uint32_t bits, uint32_t block_size,
                                            uint32_t num_kv_heads, uint32_t head_dim) {
  const uint64_t values = uint64_t{num_kv_heads} * head_dim;
  const uint64_t data = uint64_t{block_size} * values * bits / 8;
  return {uint64_t{block_size} * values * 2,
          data,
          data + uint64_t{block_size} * values / kGroup,
          values * bits / 8,
          values / kGroup,
          uint64_t{head_dim} * bits / 8};
}
// Whether V blocks of v_block_stride_bytes, whose scales start at
// v_data_section_bytes, hold the layout's sections (padding allowed).
SPARKRT_HOST_DEVICE constexpr bool v_sections_fit(const Layout& l, uint32_t block_size,
                                                  uint64_t v_data_section_bytes,
                                                  uint64_t v_block_stride_bytes) {
  return v_data_section_bytes >= l.v_data_section_bytes &&
         v_block_stride_bytes >= v_data_section_bytes + block_size * l.v_token_scale_bytes;
}
SPARKRT_HOST_DEVICE constexpr bool valid_shape(uint32_t bits, uint32_t block_size,
                                               uint32_t num_kv_heads, uint32_t head_dim) {
  return valid_bits(bits) && block_size > 0 && num_kv_heads > 0 && head_dim > 0 &&
         head_dim % kGroup == 0;
}
static_assert(layout(4, 16, 8, 128).v_block_stride_bytes == 9216);
static_assert(layout(3, 16, 8, 128).v_block_stride_bytes == 7168);
static_assert(layout(2, 16, 8, 128).v_block_stride_bytes == 5120);
static_assert(layout(4, 16, 8, 128).k_block_stride_bytes == 32768);

// Index i of a packed group (kGroup * bits / 8 bytes at `p`): an LSB-first bit
// stream, so 4-bit is two a byte, low nibble first, 2-bit four a byte, lowest
// bits first, and 3-bit eight in three bytes.
SPARKRT_HOST_DEVICE inline uint32_t unpack_index(const uint8_t* p, uint32_t bits, uint32_t i) {
  const uint32_t bit = i * bits;
  const uint32_t lo = p[bit / 8];
  const uint32_t hi = bit % 8 + bits > 8 ? p[bit / 8 + 1] : 0u;
  return ((lo | (hi << 8)) >> (bit % 8)) & ((1u << bits) - 1u);
}
// Packs kGroup indices into kGroup * bits / 8 bytes at `p`.
SPARKRT_HOST_DEVICE inline void pack_group(const uint8_t (&idx)[kGroup], uint32_t bits,
                                           uint8_t* p) {
  uint32_t acc = 0, filled = 0, out = 0;
  SPARKRT_UNROLL
  for (uint32_t i = 0; i < kGroup; ++i) {
    acc |= uint32_t{idx[i]} << filled;
    filled += bits;
    while (filled >= 8) {
      p[out++] = uint8_t(acc & 0xffu);
      acc >>= 8;
      filled -= 8;
    }
  }
}

// The steps of quantizing a group, shared by the whole-group form below and
// by kernels that spread a group over several threads (which must give the
// same bits): a value scaled so that the group's largest magnitude maps to
// the outer centroid; its nearest centroid (a value on a decision bound goes
// to the upper one); one step of the sums of squares, which run in index
// order with fused multiply-adds; and the stored scale from the sums.
SPARKRT_HOST_DEVICE inline float scaled_value(uint32_t bits, float x, float absmax) {
  return absmax > 0.0f ? x / absmax * centroid(bits, codebook_size(bits) - 1) : 0.0f;
}
SPARKRT_HOST_DEVICE inline uint32_t nearest_index(uint32_t bits, float y) {
  uint32_t k = 0;
  SPARKRT_UNROLL
  for (uint32_t j = 0; j + 1 < codebook_size(bits); ++j)
    if (y >= 0.5f * (centroid(bits, j) + centroid(bits, j + 1))) k = j + 1;
  return k;
}
SPARKRT_HOST_DEVICE inline float fma_step(float a, float b, float acc) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, acc);
#else
  return __builtin_fmaf(a, b, acc);
#endif
}
// The matched norm sqrt(x2) / sqrt(c2) (x2 = ||x||_2^2, c2 = ||chosen
// centroids||_2^2), or absmax / outer centroid where x2 is 0 in f32 (an
// all-zero or tiny group), clamped to kMaxScale. The caller rounds it to
// E4M3 (its own conversion, the same on every backend).
SPARKRT_HOST_DEVICE inline float group_scale(uint32_t bits, float x2, float c2, float absmax) {
  const float outer = centroid(bits, codebook_size(bits) - 1);
#if defined(__CUDA_ARCH__)
  const float s = x2 > 0.0f ? __fdiv_rn(__fsqrt_rn(x2), __fsqrt_rn(c2)) : __fdiv_rn(absmax, outer);
#else
  const float s = x2 > 0.0f ? __builtin_sqrtf(x2) / __builtin_sqrtf(c2) : absmax / outer;
#endif
  return s < kMaxScale ? s : kMaxScale;
}

// Quantizes one group into idx and returns its scale: the steps above in
// index order.
SPARKRT_HOST_DEVICE inline float quantize_group(const float (&x)[kGroup], uint32_t bits,
                                                uint8_t (&idx)[kGroup]) {
  float absmax = 0.0f;
  SPARKRT_UNROLL
  for (uint32_t i = 0; i < kGroup; ++i) {
    const float a = x[i] < 0.0f ? -x[i] : x[i];
    absmax = a > absmax ? a : absmax;
  }
  float x2 = 0.0f, c2 = 0.0f;
  SPARKRT_UNROLL
  for (uint32_t i = 0; i < kGroup; ++i) {
    const uint32_t k = nearest_index(bits, scaled_value(bits, x[i], absmax));
    idx[i] = uint8_t(k);
    const float c = centroid(bits, k);
    x2 = fma_step(x[i], x[i], x2);
    c2 = fma_step(c, c, c2);
  }
  return group_scale(bits, x2, c2, absmax);
}

}  // namespace sparkrt::contract::turbo_kv_cache

#endif  // SPARKRT_CONTRACT_TURBO_KV_CACHE_H_
