// paged_decode_attn_combine (kernels/ptx/paged_attention.cu; contract in
// docs/kernels.md, "Split-KV"): out = sum_z 2^(m_z - M) part_acc_z /
// sum_z 2^(m_z - M) l_z over the splits with l_z > 0, M their largest m_z,
// rounded once to bf16; zeros when no split has tokens. Grid (num_q_heads,
// num_seqs), block 256: a workgroup per (sequence, head), the split weights
// computed once into shared memory (merge_splits in paged_attention.glsl).
#version 460
#extension GL_GOOGLE_include_directive : require
#include "sparkrt.glsl"
#include "sparkrt_numeric.glsl"

layout(push_constant, scalar) uniform Params {
  F32Ptr part_acc;
  F32Ptr part_ml;
  U16Ptr out_;
  uint num_q_heads;
  uint head_dim;
  uint num_splits;
} p;

#define PA_MODE PA_COMBINE
#include "paged_attention.glsl"
