// paged_decode_attn_fp8 (kernels/ptx/paged_attention.cu; contract in
// docs/kernels.md, "Module paged_attention"): decode attention of one query
// token per sequence over a paged fp8 E4M3 cache, K = fp8 * k_scale, V =
// fp8 * v_scale, blocks cache_stride elements apart; out rounded once to
// bf16. Grid (num_q_heads / hpc, num_seqs), block 256: a workgroup serves
// hpc (1 to 8) query heads of one KV head. The computation:
// paged_attention.glsl.
#version 460
#extension GL_GOOGLE_include_directive : require
#include "sparkrt.glsl"
#include "sparkrt_numeric.glsl"

layout(push_constant, scalar) uniform Params {
  U16Ptr q;
  U8Ptr k_cache;
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
  float k_scale;
  float v_scale;
  uint q_stride;
  uint64_t cache_stride;
  uint sliding_window;
} p;

#define PA_FP8 1
#define PA_MODE PA_ONE_PASS
#include "paged_attention.glsl"
