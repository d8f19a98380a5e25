// mla_paged_decode_nvfp4 (kernels/ptx/mla.cu; contract in docs/kernels.md,
// "Module mla"): decode of one query token per sequence over the MLA cache
// in NVFP4 (E2M1 values two to a byte, one E4M3 scale per 16 values in each
// block's scale section at data_section_bytes; blocks block_stride_bytes
// apart), every token of each sequence; o rounded once to bf16. Grid
// (num_q_heads, num_seqs), block 256, or the tiled grid (num_kv_heads *
// ceil(group / 16), num_seqs), block 320; the dynamic shared memory is not
// used. The computation: mla_paged_decode.glsl.
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
  uint64_t block_stride_bytes;
  uint64_t data_section_bytes;
} p;

#define MLA_NVFP4 1
#define MLA_SPLIT 0
#include "mla_paged_decode.glsl"
