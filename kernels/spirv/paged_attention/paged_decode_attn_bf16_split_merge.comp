// paged_decode_attn_bf16_split_merge (kernels/ptx/paged_attention.cu;
// contract in docs/kernels.md, "Split-KV"): the split entry's partials (bf16
// cache), then the last workgroup of each (sequence, blockIdx.x) to arrive
// on counters[seq * grid.x + blockIdx.x] merges them into out as
// paged_decode_attn_combine does and sets the counter back to 0. Grid
// (num_q_heads / hpc, num_seqs, num_splits), block 256. The computation and
// the memory ordering: paged_attention.glsl.
#version 460
#extension GL_GOOGLE_include_directive : require
#include "sparkrt.glsl"
#include "sparkrt_numeric.glsl"

layout(push_constant, scalar) uniform Params {
  U16Ptr q;
  U16Ptr k_cache;
  U16Ptr v_cache;
  U16Ptr out_;
  F32Ptr part_acc;
  F32Ptr part_ml;
  U32Ptr counters;
  I32Ptr block_tables;
  I32Ptr seq_lens;
  uint max_blocks_per_seq;
  uint num_q_heads;
  uint num_kv_heads;
  uint head_dim;
  uint block_size;
  float inv_sqrt_d;
  uint q_stride;
  uint sliding_window;
  uint num_splits;
} p;

#define PA_FP8 0
#define PA_MODE PA_SPLIT_MERGE
#include "paged_attention.glsl"
