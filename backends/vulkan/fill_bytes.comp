// The Vulkan backend's own kernel: sets `count` bytes at `dst` to `value`,
// for the bytes of a memset that do not fill whole words (vkCmdFillBuffer
// writes words only).
#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
#extension GL_EXT_shader_8bit_storage : require

layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;

layout(buffer_reference, scalar, buffer_reference_align = 1) buffer Bytes { uint8_t v[]; };

layout(push_constant, scalar) uniform Params {
  Bytes dst;
  uint value;
  uint count;
} p;

void main() {
  for (uint i = gl_LocalInvocationID.x; i < p.count; i += gl_WorkGroupSize.x)
    p.dst.v[i] = uint8_t(p.value);
}
