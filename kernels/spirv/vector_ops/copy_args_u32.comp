// out[i] = args.v[i] for i < 34 (kernels/ptx/vector_ops.cu): 144 bytes of
// parameters, more than the 128 bytes of push constants every device offers,
// so they come through the argument buffer (sparkrt.glsl).
#version 460
#extension GL_GOOGLE_include_directive : require
#include "sparkrt.glsl"

struct CopyArgs {
  uint v[34];
};

layout(buffer_reference, scalar, buffer_reference_align = 8) readonly buffer Args {
  U32Ptr out_;
  CopyArgs args;
};
SPARKRT_ARGUMENT_BUFFER(Args);

void main() {
  const uint i = threadIdx.x;
  Args p = sparkrt_arguments.sparkrt_args;
  if (i < 34) p.out_.v[i] = p.args.v[i];
}
