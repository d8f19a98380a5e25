// reshape_and_cache_flash_v_only (kernels/ptx/kv_cache.cu; contract in
// docs/kernels.md, "Module kv_cache"): the value half of reshape_and_cache,
// token blockIdx.x's value row into its slot of v_cache, exact; a negative
// slot skips the token. Grid num_tokens, block 256 (kCopyThreads).
#version 460
#extension GL_GOOGLE_include_directive : require
#include "sparkrt.glsl"
#include "sparkrt_numeric.glsl"

// Eight bf16 in one 16-byte access.
layout(buffer_reference, scalar, buffer_reference_align = 16) buffer U32x4Ptr { uvec4 v[]; };

layout(push_constant, scalar) uniform Params {
  U16Ptr value;
  U16Ptr v_cache;
  I64Ptr slot_mapping;
  uint num_kv_heads;
  uint head_dim;
  uint block_size;  // the dense NHD layout puts slot s at s * row for any block size
  uint value_stride;
} p;

void main() {
  const int64_t slot = p.slot_mapping.v[blockIdx.x];
  if (slot < 0) return;
  const uint row = p.num_kv_heads * p.head_dim;
  const uint64_t v = uint64_t(p.value) + 2ul * (uint64_t(blockIdx.x) * p.value_stride);
  const uint64_t vd = uint64_t(p.v_cache) + 2ul * (uint64_t(slot) * row);
  if (row % 8u == 0u && ((v | vd) & 15ul) == 0ul) {
    U32x4Ptr vs = U32x4Ptr(v), vt = U32x4Ptr(vd);
    for (uint i = threadIdx.x; i < row / 8u; i += blockDim.x) vt.v[i] = vs.v[i];
  } else {
    U16Ptr vs = U16Ptr(v), vt = U16Ptr(vd);
    for (uint i = threadIdx.x; i < row; i += blockDim.x) vt.v[i] = vs.v[i];
  }
}
