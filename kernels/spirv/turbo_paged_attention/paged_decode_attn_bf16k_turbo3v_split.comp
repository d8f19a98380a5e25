// paged_decode_attn_bf16k_turbo3v_split (kernels/ptx/turbo_paged_attention.cu;
// contract in docs/kernels.md, "Module turbo_paged_attention" and
// "Split-KV"): split z = blockIdx.z of each sequence's tokens (boundaries on
// multiples of 16), bf16 K and 3-bit TurboQuant V; writes the split's
// unnormalised output part_acc and its (max, sum) in base 2 part_ml, for
// paged_attention.paged_decode_attn_combine to merge. Grid (num_q_heads /
// hpc, num_seqs, num_splits), block 256. The computation:
// turbo_paged_attention.glsl.
#version 460
#extension GL_GOOGLE_include_directive : require
#include "sparkrt.glsl"
#include "sparkrt_numeric.glsl"

layout(push_constant, scalar) uniform Params {
  U16Ptr q;
  U16Ptr k_cache;
  U8Ptr v_cache;
  F32Ptr part_acc;
  F32Ptr part_ml;
  I32Ptr block_tables;
  I32Ptr seq_lens;
  uint max_blocks_per_seq;
  uint num_q_heads;
  uint num_kv_heads;
  uint head_dim;
  uint block_size;
  float inv_sqrt_d;
  uint q_stride;
  uint64_t v_block_stride_bytes;
  uint64_t v_data_section_bytes;
  uint sliding_window;
  uint num_splits;
} p;

#define TPA_BITS 3
#define TPA_SPLIT 1
#include "turbo_paged_attention.glsl"
