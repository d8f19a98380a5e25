// paged_decode_attn_bf16k_turbo3v (kernels/ptx/turbo_paged_attention.cu; contract
// in docs/kernels.md, "Module turbo_paged_attention"): decode attention of
// one query token per sequence over a paged bf16 K pool and a 3-bit
// TurboQuant V pool, out = softmax(q K^T * inv_sqrt_d) V per query head,
// exact over the stored V values, rounded once to bf16. Grid (num_q_heads /
// hpc, num_seqs), block 256: a workgroup serves hpc (1 to 8) query heads of
// one KV head. The computation: turbo_paged_attention.glsl.
#version 460
#extension GL_GOOGLE_include_directive : require
#include "sparkrt.glsl"
#include "sparkrt_numeric.glsl"

layout(push_constant, scalar) uniform Params {
  U16Ptr q;
  U16Ptr k_cache;
  U8Ptr v_cache;
  U16Ptr out_;
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
} p;

#define TPA_BITS 3
#define TPA_SPLIT 0
#include "turbo_paged_attention.glsl"
