// k3_mla_sdpa_combine_f32 (kernels/ptx/mla_decode.cu; contract in
// sparkrt/contract/mla_decode.h): out[h] = the merge of head h's num_splits
// partials, times sigmoid(g[h]) when use_gate; zeros where no split saw a
// token. Grid (heads), block kCombineThreads; another block or num_splits >
// kMaxSplits returns without writing. The computation: mla_decode_split.glsl.
#version 460
#extension GL_GOOGLE_include_directive : require
#include "sparkrt.glsl"

layout(push_constant, scalar) uniform Params {
  F32Ptr part_acc;
  F32Ptr part_ml;
  F32Ptr g;
  F32Ptr out_;
  uint heads;
  uint dv;
  uint num_splits;
  uint use_gate;
} p;

#define MLA_DECODE_COMBINE
#include "mla_decode_split.glsl"

void main() { ms_combine(); }
