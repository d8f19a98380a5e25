// reshape_and_cache_fp8 (kernels/ptx/kv_cache.cu; contract in docs/kernels.md,
// "Module kv_cache"): token blockIdx.x's key and value rows into its slot of
// the fp8 E4M3 caches, k_cache = fp8_sat(key / k_scale) and
// v_cache = fp8_sat(value / v_scale): one IEEE division, one saturating
// conversion, bit for bit the reference's. Blocks are cache_stride elements
// apart (padded pools); a negative slot skips the token.
// Grid num_tokens, block 256 (kCopyThreads).
#version 460
#extension GL_GOOGLE_include_directive : require
#include "sparkrt.glsl"
#include "sparkrt_math.glsl"
#include "sparkrt_numeric.glsl"

// Eight bf16 in one 16-byte load; eight fp8 in one 8-byte store.
layout(buffer_reference, scalar, buffer_reference_align = 16) buffer U32x4Ptr { uvec4 v[]; };
layout(buffer_reference, scalar, buffer_reference_align = 8) buffer U32x2Ptr { uvec2 v[]; };

layout(push_constant, scalar) uniform Params {
  U16Ptr key;
  U16Ptr value;
  U8Ptr k_cache;
  U8Ptr v_cache;
  I64Ptr slot_mapping;
  uint num_kv_heads;
  uint head_dim;
  uint block_size;
  float k_scale;
  float v_scale;
  uint key_stride;
  uint value_stride;
  uint64_t cache_stride;  // elements per block
} p;

// Two bf16 (one 32-bit word) to two fp8 in the low 16 bits, element 0 lowest.
uint fp8x2(uint bf16x2, float scale) {
  const uint lo = f32_to_fp8_e4m3(ieee_div(bf16_to_f32(bf16x2 & 0xffffu), scale));
  const uint hi = f32_to_fp8_e4m3(ieee_div(bf16_to_f32(bf16x2 >> 16), scale));
  return lo | (hi << 8);
}

uvec2 fp8x8(uvec4 bf16x8, float scale) {
  return uvec2(fp8x2(bf16x8.x, scale) | (fp8x2(bf16x8.y, scale) << 16),
               fp8x2(bf16x8.z, scale) | (fp8x2(bf16x8.w, scale) << 16));
}

void main() {
  const int64_t slot = p.slot_mapping.v[blockIdx.x];
  if (slot < 0) return;
  const uint row = p.num_kv_heads * p.head_dim;
  const uint64_t k = uint64_t(p.key) + 2ul * (uint64_t(blockIdx.x) * p.key_stride);
  const uint64_t v = uint64_t(p.value) + 2ul * (uint64_t(blockIdx.x) * p.value_stride);
  const uint64_t dst = uint64_t(slot) / p.block_size * p.cache_stride +
                       uint64_t(slot) % p.block_size * row;
  const uint64_t kd = uint64_t(p.k_cache) + dst, vd = uint64_t(p.v_cache) + dst;
  const float k_scale = p.k_scale, v_scale = p.v_scale;
  // With row and cache_stride multiples of 8, every cache row is as aligned
  // as the cache.
  if (row % 8u == 0u && p.cache_stride % 8ul == 0ul && ((k | v) & 15ul) == 0ul &&
      ((uint64_t(p.k_cache) | uint64_t(p.v_cache)) & 7ul) == 0ul) {
    U32x4Ptr ks = U32x4Ptr(k), vs = U32x4Ptr(v);
    U32x2Ptr kt = U32x2Ptr(kd), vt = U32x2Ptr(vd);
    for (uint i = threadIdx.x; i < row / 8u; i += blockDim.x) {
      kt.v[i] = fp8x8(ks.v[i], k_scale);
      vt.v[i] = fp8x8(vs.v[i], v_scale);
    }
  } else {
    U16Ptr ks = U16Ptr(k), vs = U16Ptr(v);
    U8Ptr kt = U8Ptr(kd), vt = U8Ptr(vd);
    for (uint i = threadIdx.x; i < row; i += blockDim.x) {
      kt.v[i] = uint8_t(f32_to_fp8_e4m3(ieee_div(bf16_to_f32(uint(ks.v[i])), k_scale)));
      vt.v[i] = uint8_t(f32_to_fp8_e4m3(ieee_div(bf16_to_f32(uint(vs.v[i])), v_scale)));
    }
  }
}
