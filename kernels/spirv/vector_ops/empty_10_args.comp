// Ten arguments and no work (kernels/ptx/vector_ops.cu): the launch cost.
#version 460
#extension GL_GOOGLE_include_directive : require
#include "sparkrt.glsl"

layout(push_constant, scalar) uniform Params {
  uint64_t p0;
  uint64_t p1;
  uint64_t p2;
  uint64_t p3;
  uint a;
  uint b;
  uint c;
  uint64_t d;
  float e;
  float f;
} p;

void main() {
  // Reads every argument, as the CUDA kernel does, and never writes.
  if (threadIdx.x == 0xFFFFFFFFu && p.p0 == p.p1 && p.p2 == p.p3 && p.a == p.b &&
      uint64_t(p.c) == p.d && p.e == p.f) {
    barrier();
  }
}
