// out[i] = a[i] + b[i] for i < n (kernels/ptx/vector_ops.cu).
#version 460
#extension GL_GOOGLE_include_directive : require
#include "sparkrt.glsl"

layout(push_constant, scalar) uniform Params {
  F32Ptr a;
  F32Ptr b;
  F32Ptr out_;
  uint n;
} p;

void main() {
  const uint i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < p.n) p.out_.v[i] = p.a.v[i] + p.b.v[i];
}
