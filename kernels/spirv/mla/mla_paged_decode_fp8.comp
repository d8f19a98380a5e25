// mla_paged_decode_fp8 (kernels/ptx/mla.cu; contract in docs/kernels.md,
// "Module mla"): decode of one query token per sequence over the MLA cache
// in fp8 E4M3 (K = fp8 * k_scale, V = its first kv_cache_dim - 64 values *
// v_scale, blocks cache_stride bytes apart), with a sliding window,
// optional per-head sinks and an optional compressed pool of
// comp_block_count rows per sequence attended first; o rounded once to
// bf16. Grid (num_q_heads, num_seqs), block 256, or the tiled grid
// (num_kv_heads * ceil(group / 16), num_seqs), block 320; the dynamic shared
// memory is not used. The computation: mla_paged_decode.glsl.
#version 460
#extension GL_GOOGLE_include_directive : require
#include "sparkrt.glsl"
#include "sparkrt_numeric.glsl"

layout(push_constant, scalar) uniform Params {
  U16Ptr q;
  U8Ptr k_cache;
  U8Ptr v_cache;
  U16Ptr o;
  I32Ptr block_tables;
  I32Ptr seq_lens;
  uint max_blocks_per_seq;
  uint num_q_heads;
  uint num_kv_heads;
  uint q_head_dim;
  uint kv_cache_dim;
  uint block_size;
  float inv_sqrt_d;
  float k_scale;
  float v_scale;
  uint64_t cache_stride;
  uint sliding_window;
  F32Ptr sinks;
  U8Ptr comp_pool;
  uint comp_block_count;
} p;

#define MLA_NVFP4 0
#define MLA_SPLIT 0
#include "mla_paged_decode.glsl"
