// k3_mla_sdpa_split_f32 (kernels/ptx/mla_decode.cu; contract in
// sparkrt/contract/mla_decode.h and docs/kernels.md, "Module mla_decode"):
// split z of head h attends over split_kv::token_range(seq_len, 0,
// num_splits, z) and writes its unnormalized partials part_acc[h][z][dv]
// and part_ml[h][z] = (max in base 2, sum). Grid (heads, num_splits), block
// kSplitThreads; another block, dq 0 or dq > kSplitMaxDq returns without
// writing. The computation: mla_decode_split.glsl.
#version 460
#extension GL_GOOGLE_include_directive : require
#include "sparkrt.glsl"

layout(push_constant, scalar) uniform Params {
  F32Ptr q;
  F32Ptr k;
  F32Ptr v;
  F32Ptr part_acc;
  F32Ptr part_ml;
  uint seq_len;
  uint heads;
  uint dq;
  uint dv;
  uint num_splits;
} p;

#define MLA_DECODE_SPLIT
#include "mla_decode_split.glsl"

void main() { ms_split(); }
