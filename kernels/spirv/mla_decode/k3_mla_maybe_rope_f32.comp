// k3_mla_maybe_rope_f32 (kernels/ptx/mla_decode.cu; contract in
// docs/kernels.md, "Module mla_decode"): unless use_nope, rotates each
// head's rope part, dims [nope_dim, nope_dim + rope_dim) of q and k
// ([heads][nope_dim + rope_dim] f32), rotate-half by position pos, in
// place; the nope part is never written. Grid ceil(heads / 128), block 128
// (kRopeThreads): a workgroup serves as many heads as it has invocations.
// The computation: mla_decode.glsl.
#version 460
#extension GL_GOOGLE_include_directive : require
#include "sparkrt.glsl"

layout(push_constant, scalar) uniform Params {
  F32Ptr q;
  F32Ptr k;
  uint heads;
  uint nope_dim;
  uint rope_dim;
  uint pos;
  float theta;
  uint use_nope;
} p;

#define MLA_DECODE_ROPE
#include "mla_decode.glsl"
