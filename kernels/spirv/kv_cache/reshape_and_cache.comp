// reshape_and_cache (kernels/ptx/kv_cache.cu; contract in docs/kernels.md,
// "Module kv_cache"): copies token blockIdx.x's key and value rows
// (num_kv_heads * head_dim bf16, key_stride / value_stride elements apart)
// into its slot of k_cache and v_cache, dense NHD blocks, exact; a negative
// slot skips the token. Grid num_tokens, block 256 (kCopyThreads).
#version 460
#extension GL_GOOGLE_include_directive : require
#include "sparkrt.glsl"
#include "sparkrt_numeric.glsl"

// Eight bf16 in one 16-byte access.
layout(buffer_reference, scalar, buffer_reference_align = 16) buffer U32x4Ptr { uvec4 v[]; };

layout(push_constant, scalar) uniform Params {
  U16Ptr key;
  U16Ptr value;
  U16Ptr k_cache;
  U16Ptr v_cache;
  I64Ptr slot_mapping;
  uint num_kv_heads;
  uint head_dim;
  uint block_size;  // the dense NHD layout puts slot s at s * row for any block size
  uint key_stride;
  uint value_stride;
} p;

void main() {
  // The slot's load is not waited for before the rows' loads are issued.
  const int64_t slot = p.slot_mapping.v[blockIdx.x];
  const uint row = p.num_kv_heads * p.head_dim;
  const uint64_t k = uint64_t(p.key) + 2ul * (uint64_t(blockIdx.x) * p.key_stride);
  const uint64_t v = uint64_t(p.value) + 2ul * (uint64_t(blockIdx.x) * p.value_stride);
  // Rows of whole 16-byte units on 16-byte boundaries move in uvec4s
  // (slot * row keeps the caches' alignment when row % 8 == 0), the K row's
  // and then the V row's spread over all the threads.
  if (row % 8u == 0u && ((k | v | uint64_t(p.k_cache) | uint64_t(p.v_cache)) & 15ul) == 0ul) {
    const uint units = row / 8u;
    for (uint i = threadIdx.x; i < 2u * units; i += blockDim.x) {
      const bool is_k = i < units;
      const uint u = is_k ? i : i - units;
      const uvec4 x = U32x4Ptr(is_k ? k : v).v[u];
      if (slot < 0) return;
      const uint64_t cache = is_k ? uint64_t(p.k_cache) : uint64_t(p.v_cache);
      U32x4Ptr(cache + 2ul * (uint64_t(slot) * row)).v[u] = x;
    }
  } else {
    if (slot < 0) return;
    U16Ptr ks = U16Ptr(k), vs = U16Ptr(v);
    U16Ptr kt = U16Ptr(uint64_t(p.k_cache) + 2ul * (uint64_t(slot) * row));
    U16Ptr vt = U16Ptr(uint64_t(p.v_cache) + 2ul * (uint64_t(slot) * row));
    for (uint i = threadIdx.x; i < row; i += blockDim.x) {
      kt.v[i] = ks.v[i];
      vt.v[i] = vs.v[i];
    }
  }
}
