// fused_k_norm_rope_cache_write_bf16_mrope (kernels/ptx/kv_cache.cu; contract
// in docs/kernels.md, "Module kv_cache"): fused_k_norm_rope_cache_write_bf16
// with MRoPE, rotary pair i taking its position from (pos_t, pos_h, pos_w)[i % 3];
// with equal positions it is the scalar entry bit for bit (the same code).
// Grid (num_tokens, num_kv_heads), block head_dim: one invocation per element.
#version 460
#extension GL_GOOGLE_include_directive : require
#include "sparkrt.glsl"
#include "k_norm_rope.glsl"

layout(push_constant, scalar) uniform Params {
  U16Ptr k_in;
  U16Ptr k_norm_weight;
  I32Ptr pos_t;
  I32Ptr pos_h;
  I32Ptr pos_w;
  U16Ptr k_cache;
  I64Ptr slot_mapping;
  uint num_kv_heads;
  uint head_dim;
  uint rotary_dim;
  uint block_size;  // the dense NHD layout puts slot s at s * row for any block size
  float rms_eps;
  float theta;
} p;

void main() {
  const uint t = blockIdx.x, h = blockIdx.y;
  const int64_t slot = p.slot_mapping.v[t];
  if (slot < 0) return;  // uniform over the workgroup: no barrier is split
  const ivec3 pos = ivec3(p.pos_t.v[t], p.pos_h.v[t], p.pos_w.v[t]);
  const uint64_t row = (uint64_t(t) * p.num_kv_heads + h) * p.head_dim;
  U16Ptr k_row = U16Ptr(uint64_t(p.k_in) + 2ul * row);
  const float r = k_norm_rope(k_row, p.k_norm_weight, p.head_dim, p.rotary_dim, p.rms_eps, p.theta,
                              pos);
  const uint64_t dst = (uint64_t(slot) * p.num_kv_heads + h) * p.head_dim + threadIdx.x;
  U16Ptr(uint64_t(p.k_cache) + 2ul * dst).v[0] = uint16_t(f32_to_bf16(r));
}
