// What every sparkrt compute shader shares (docs/kernels.md, "SPIR-V
// modules"): 64-bit device addresses as buffer references, scalar block
// layout so that push constants follow the CUDA parameter layout, and the
// block shape from specialization constants 0-2, so one pipeline per launch
// shape serves any `block`.
#ifndef SPARKRT_GLSL_
#define SPARKRT_GLSL_

#extension GL_EXT_buffer_reference : require
#extension GL_EXT_buffer_reference2 : require
#extension GL_EXT_scalar_block_layout : require
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require

layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;

// CUDA's names for the launch geometry, as the PTX kernels use them.
#define threadIdx gl_LocalInvocationID
#define blockIdx gl_WorkGroupID
#define blockDim gl_WorkGroupSize
#define gridDim gl_NumWorkGroups

// Device memory seen through a 64-bit address, one element type each.
layout(buffer_reference, scalar, buffer_reference_align = 4) buffer F32Ptr { float v[]; };
layout(buffer_reference, scalar, buffer_reference_align = 4) buffer U32Ptr { uint v[]; };

// A kernel whose parameters exceed the 128 bytes of push constants that
// every Vulkan device offers takes them from an argument buffer: the
// parameters are the members of a buffer_reference block `Type` (scalar
// layout, the signature's offsets), and the push constants are its address
// alone, which the backend fills per launch from a ring it owns:
//
//   layout(buffer_reference, scalar, buffer_reference_align = 8) readonly buffer Args { ... };
//   SPARKRT_ARGUMENT_BUFFER(Args);
//   ... Args p = sparkrt_arguments.sparkrt_args; p.x ...
#define SPARKRT_ARGUMENT_BUFFER(Type) \
  layout(push_constant, scalar) uniform SparkrtArgumentAddress { Type sparkrt_args; } sparkrt_arguments

#endif  // SPARKRT_GLSL_
