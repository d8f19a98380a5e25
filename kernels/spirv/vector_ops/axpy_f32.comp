// y[i] = alpha * x[i] + y[i] (kernels/ptx/vector_ops.cu): a struct argument
// and a 64-bit count.
#version 460
#extension GL_GOOGLE_include_directive : require
#include "sparkrt.glsl"

struct AxpyParams {
  float alpha;
  uint pad;
  uint64_t n;
};

layout(push_constant, scalar) uniform Params {
  AxpyParams params;
  F32Ptr x;
  F32Ptr y;
} p;

void main() {
  const uint64_t i = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= p.params.n) return;
  // A 64-bit index: element i's address, as the CUDA kernel computes it.
  F32Ptr x = F32Ptr(uint64_t(p.x) + 4ul * i);
  F32Ptr y = F32Ptr(uint64_t(p.y) + 4ul * i);
  y.v[0] = p.params.alpha * x.v[0] + y.v[0];
}
