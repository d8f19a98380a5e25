// hadamard_transform_bf16 (kernels/ptx/turbo_kv_cache.cu; contract in
// docs/kernels.md, "Module turbo_kv_cache"): out = H x / sqrt(head_dim) for
// the row x of head blockIdx.y of token blockIdx.x, H the Sylvester-order
// Hadamard matrix: f32 butterflies of strides 1, 2, 4, ..., one multiply by
// 1 / sqrt(head_dim), one bf16 rounding, bit for bit the reference's. `in`
// may equal `out`. Grid (num_tokens, num_heads), block 256. The computation:
// turbo_kv_cache.glsl.
#version 460
#extension GL_GOOGLE_include_directive : require
#include "sparkrt.glsl"
#include "sparkrt_math.glsl"
#include "sparkrt_numeric.glsl"

layout(push_constant, scalar) uniform Params {
  U16Ptr in_;
  U16Ptr out_;
  uint head_dim;
  uint in_stride;
  uint out_stride;
} p;

#define TURBO_HADAMARD
#include "turbo_kv_cache.glsl"
