// fused_k_norm_rope_cache_write_fp8 (kernels/ptx/kv_cache.cu; contract in
// docs/kernels.md, "Module kv_cache"): the fused K path into an fp8 E4M3
// cache, k_cache[slot][h] = fp8_sat(rope(rmsnorm(k_in[t][h])) * inv_scale),
// straight from f32; tokens with a negative slot are skipped.
// Grid (num_tokens, num_kv_heads), block head_dim: one invocation per element.
#version 460
#extension GL_GOOGLE_include_directive : require
#include "sparkrt.glsl"
#include "k_norm_rope.glsl"

layout(push_constant, scalar) uniform Params {
  U16Ptr k_in;
  U16Ptr k_norm_weight;
  I32Ptr positions;
  U8Ptr k_cache;
  I64Ptr slot_mapping;
  uint num_kv_heads;
  uint head_dim;
  uint rotary_dim;
  uint block_size;  // the dense NHD layout puts slot s at s * row for any block size
  float rms_eps;
  float theta;
  float inv_scale;
} p;

void main() {
  const uint t = blockIdx.x, h = blockIdx.y;
  const int64_t slot = p.slot_mapping.v[t];
  if (slot < 0) return;  // uniform over the workgroup: no barrier is split
  const int pos = p.positions.v[t];
  const uint64_t row = (uint64_t(t) * p.num_kv_heads + h) * p.head_dim;
  U16Ptr k_row = U16Ptr(uint64_t(p.k_in) + 2ul * row);
  const float r = k_norm_rope(k_row, p.k_norm_weight, p.head_dim, p.rotary_dim, p.rms_eps, p.theta,
                              ivec3(pos));
  const uint64_t dst = (uint64_t(slot) * p.num_kv_heads + h) * p.head_dim + threadIdx.x;
  precise const float scaled = r * p.inv_scale;
  U8Ptr(uint64_t(p.k_cache) + dst).v[0] = uint8_t(f32_to_fp8_e4m3(scaled));
}
