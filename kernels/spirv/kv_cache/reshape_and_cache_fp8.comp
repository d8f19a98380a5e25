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

// fp8_sat(a / b) bit for bit as from the correctly rounded quotient, given
// r = 1 / b within 2.5 ulp (Vulkan's bound for `/` in the normal range), b
// and r normal, and |b| >= 2^-99 (so that no subnormal a has a nonzero fp8
// quotient). q = a * r is within 3 ulp of a / b: in units of the fp8 ulp at
// its magnitude, q and the rounded quotient lie within 2^-17 of each other,
// so they have the same fp8 code unless an fp8 rounding midpoint lies within
// 2^-14 of q. Only then (and for infinities, NaN) does it divide exactly.
uint fp8_quotient(float a, float b, float r) {
  precise const float q = a * r;
  const float m = abs(q);
  const int e = int(floatBitsToUint(m) >> 23) - 127;
  // Power-of-two scalings: exact.
  precise const float t = e < -6 ? m * 512.0 : m * uintBitsToFloat(uint(130 - e) << 23);
  precise const float frac = t - floor(t);
  if (abs(frac - 0.5) > 1.0 / 16384.0) return f32_to_fp8_e4m3(q);
  return f32_to_fp8_e4m3(ieee_div(a, b));
}

// Whether fp8_quotient's conditions hold for the scale b.
bool reciprocal_ok(float b) {
  const uint biased = (floatBitsToUint(b) >> 23) & 0xffu;
  return biased >= 28u && biased <= 252u;
}

// Eight bf16 to eight fp8, element 0 lowest.
uvec2 fp8x8(uvec4 bf16x8, float scale, float r, bool fast) {
  uint w[4] = uint[4](bf16x8.x, bf16x8.y, bf16x8.z, bf16x8.w);
  uint out2[2] = uint[2](0u, 0u);
  for (int j = 0; j < 8; ++j) {
    const float x = bf16_to_f32(j % 2 == 0 ? w[j / 2] & 0xffffu : w[j / 2] >> 16);
    const uint code = fast ? fp8_quotient(x, scale, r) : f32_to_fp8_e4m3(ieee_div(x, scale));
    out2[j / 4] |= code << (8 * (j % 4));
  }
  return uvec2(out2[0], out2[1]);
}

// The slot's byte offset in the cache; a 32-bit division where it fits (a
// 64-bit one is emulated on NVIDIA).
uint64_t slot_offset(int64_t slot, uint row) {
  if (slot <= 0xffffffffl) {
    const uint s = uint(slot);
    return uint64_t(s / p.block_size) * p.cache_stride + uint64_t(s % p.block_size) * row;
  }
  return uint64_t(slot) / p.block_size * p.cache_stride + uint64_t(slot) % p.block_size * row;
}

void main() {
  // The slot's load is not waited for before the rows' loads are issued.
  const int64_t slot = p.slot_mapping.v[blockIdx.x];
  const uint row = p.num_kv_heads * p.head_dim;
  const uint64_t k = uint64_t(p.key) + 2ul * (uint64_t(blockIdx.x) * p.key_stride);
  const uint64_t v = uint64_t(p.value) + 2ul * (uint64_t(blockIdx.x) * p.value_stride);
  const float k_scale = p.k_scale, v_scale = p.v_scale;
  const bool fast = reciprocal_ok(k_scale) && reciprocal_ok(v_scale);
  const float k_r = 1.0 / k_scale, v_r = 1.0 / v_scale;
  // With row and cache_stride multiples of 8, every cache row is as aligned
  // as the cache: the K row's and then the V row's units of eight spread over
  // all the threads.
  if (row % 8u == 0u && p.cache_stride % 8ul == 0ul && ((k | v) & 15ul) == 0ul &&
      ((uint64_t(p.k_cache) | uint64_t(p.v_cache)) & 7ul) == 0ul) {
    const uint units = row / 8u;
    for (uint i = threadIdx.x; i < 2u * units; i += blockDim.x) {
      const bool is_k = i < units;
      const uint u = is_k ? i : i - units;
      const uvec4 x = U32x4Ptr(is_k ? k : v).v[u];
      if (slot < 0) return;
      const uint64_t dst = slot_offset(slot, row);
      const uint64_t cache = is_k ? uint64_t(p.k_cache) : uint64_t(p.v_cache);
      U32x2Ptr(cache + dst).v[u] = fp8x8(x, is_k ? k_scale : v_scale, is_k ? k_r : v_r, fast);
    }
  } else {
    if (slot < 0) return;
    const uint64_t dst = slot_offset(slot, row);
    U16Ptr ks = U16Ptr(k), vs = U16Ptr(v);
    U8Ptr kt = U8Ptr(uint64_t(p.k_cache) + dst), vt = U8Ptr(uint64_t(p.v_cache) + dst);
    for (uint i = threadIdx.x; i < row; i += blockDim.x) {
      kt.v[i] = uint8_t(f32_to_fp8_e4m3(ieee_div(bf16_to_f32(uint(ks.v[i])), k_scale)));
      vt.v[i] = uint8_t(f32_to_fp8_e4m3(ieee_div(bf16_to_f32(uint(vs.v[i])), v_scale)));
    }
  }
}
