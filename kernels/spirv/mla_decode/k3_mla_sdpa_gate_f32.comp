// k3_mla_sdpa_gate_f32 (kernels/ptx/mla_decode.cu; contract in
// docs/kernels.md, "Module mla_decode"): out[h] = softmax_t(q[h] . k[t][h] /
// sqrt(dq)) . v[t][h], times sigmoid(g[h]) when use_gate; q [heads][dq],
// k [seq_len][heads][dq], v [seq_len][heads][dv], g and out [heads][dv],
// all f32; seq_len 0 writes zeros. Grid (heads), block 32 (kSdpaThreads;
// any other block returns without writing): one workgroup a head. The
// computation: mla_decode.glsl.
#version 460
#extension GL_GOOGLE_include_directive : require
#include "sparkrt.glsl"

layout(push_constant, scalar) uniform Params {
  F32Ptr q;
  F32Ptr k;
  F32Ptr v;
  F32Ptr g;
  F32Ptr out_;
  uint seq_len;
  uint heads;
  uint dq;
  uint dv;
  uint use_gate;
} p;

#define MLA_DECODE_SDPA
#include "mla_decode.glsl"
