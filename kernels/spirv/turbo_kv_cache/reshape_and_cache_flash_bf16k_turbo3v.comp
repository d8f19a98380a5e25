// reshape_and_cache_flash_bf16k_turbo3v (kernels/ptx/turbo_kv_cache.cu; contract in
// docs/kernels.md, "TurboQuant V cache" and "Module turbo_kv_cache"): token
// blockIdx.x's K row raw into its slot of the bf16 K pool (blocks
// k_block_stride_bytes apart) and its V row quantized to 3 bits a value with an
// E4M3 scale per 16 values into its slot of the V pool, bit for bit the
// reference's; a negative slot skips the token. Grid num_tokens, block 256.
// The computation: turbo_kv_cache.glsl.
#version 460
#extension GL_GOOGLE_include_directive : require
#include "sparkrt.glsl"
#include "sparkrt_math.glsl"
#include "sparkrt_numeric.glsl"

layout(push_constant, scalar) uniform Params {
  U16Ptr key;
  U16Ptr value;
  U8Ptr k_cache;
  U8Ptr v_cache;
  I64Ptr slot_mapping;
  uint num_kv_heads;
  uint head_dim;
  uint block_size;
  uint key_stride;
  uint value_stride;
  uint64_t k_block_stride_bytes;
  uint64_t v_block_stride_bytes;
  uint64_t v_data_section_bytes;
} p;

#define TURBO_BITS 3
#include "turbo_kv_cache.glsl"
