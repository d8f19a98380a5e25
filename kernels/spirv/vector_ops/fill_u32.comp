// out[i] = value for i < n (kernels/ptx/vector_ops.cu).
#version 460
#extension GL_GOOGLE_include_directive : require
#include "sparkrt.glsl"

layout(push_constant, scalar) uniform Params {
  U32Ptr out_;
  uint value;
  uint n;
} p;

void main() {
  const uint i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < p.n) p.out_.v[i] = p.value;
}
