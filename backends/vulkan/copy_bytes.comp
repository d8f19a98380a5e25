// The Vulkan backend's own kernel for device-to-device copies: `vectors`
// 16-byte units from src to dst (both 16-byte aligned), then the `tail` bytes
// after them. NVIDIA runs vkCmdCopyBuffer at a tenth of the memory's rate;
// a shader with wide accesses keeps up with it.
#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
#extension GL_EXT_shader_8bit_storage : require

layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;

layout(buffer_reference, scalar, buffer_reference_align = 16) buffer Vectors { uvec4 v[]; };
layout(buffer_reference, scalar, buffer_reference_align = 1) buffer Bytes { uint8_t v[]; };

layout(push_constant, scalar) uniform Params {
  uint64_t dst;
  uint64_t src;
  uint vectors;
  uint tail;
} p;

void main() {
  Vectors src = Vectors(p.src), dst = Vectors(p.dst);
  const uint threads = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  uint i = gl_GlobalInvocationID.x;
  // Four loads in flight before their stores (the references may alias, so
  // the compiler would not reorder them itself).
  for (; i + 3u * threads < p.vectors; i += 4u * threads) {
    const uvec4 a = src.v[i], b = src.v[i + threads], c = src.v[i + 2u * threads],
                d = src.v[i + 3u * threads];
    dst.v[i] = a;
    dst.v[i + threads] = b;
    dst.v[i + 2u * threads] = c;
    dst.v[i + 3u * threads] = d;
  }
  for (; i < p.vectors; i += threads) dst.v[i] = src.v[i];
  if (gl_GlobalInvocationID.x < p.tail) {
    const uint64_t at = 16ul * p.vectors + gl_GlobalInvocationID.x;
    Bytes(p.dst + at).v[0] = Bytes(p.src + at).v[0];
  }
}
