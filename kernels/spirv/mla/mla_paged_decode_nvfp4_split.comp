// mla_paged_decode_nvfp4_split (kernels/ptx/mla.cu; contract in
// docs/kernels.md, "Module mla", "Split-KV"): mla_paged_decode_nvfp4 over
// split z = blockIdx.z of each sequence's tokens (whole tiles of 64:
// ceil(tiles / num_splits) each); writes each head's unnormalised output to
// part_acc and its (max, sum) in base 2 to part_ml ((-inf, 0) and zeros for
// an empty split), for mla_decode_combine to merge. The tiled grid
// (num_kv_heads * ceil(group / 16), num_seqs, num_splits), block 320. The
// computation: mla_paged_decode.glsl.
#version 460
#extension GL_GOOGLE_include_directive : require
#include "sparkrt.glsl"
#include "sparkrt_numeric.glsl"

layout(push_constant, scalar) uniform Params {
  U16Ptr q;
  U8Ptr k_cache;
  U8Ptr v_cache;
  F32Ptr part_acc;
  F32Ptr part_ml;
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
#define MLA_SPLIT 1
#include "mla_paged_decode.glsl"
