// paged_decode_attn_fp8 (kernels/ptx/paged_attention.cu; contract in docs/kernels.md, "Module
// paged_attention"): one pass: out[seq][h] = softmax(scores) V, rounded once to bf16. grid
// (num_q_heads / hpc, num_seqs), block 256. The computation: sparkrt_paged_decode.glsl.
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
#include "sparkrt_paged_decode.glsl"
