// The Vulkan backend's device-to-device copy: `bytes` bytes from src to dst,
// any alignment, the ranges apart. The destination is cut into 16-byte
// aligned units, one a thread: a whole unit is one 16-byte store, from one
// 16-byte load where the source is aligned alike, four word loads where it
// is word-aligned alike, else five word loads shifted into place; the partial
// units at both ends are copied a byte at a time. On NVIDIA this runs at the
// memory's rate where vkCmdCopyBuffer reaches a fifth of it.
#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
#extension GL_EXT_shader_8bit_storage : require

layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;

layout(buffer_reference, scalar, buffer_reference_align = 16) buffer Vector { uvec4 v; };
layout(buffer_reference, scalar, buffer_reference_align = 4) buffer Words { uint v[]; };
layout(buffer_reference, scalar, buffer_reference_align = 1) buffer Bytes { uint8_t v[]; };

layout(push_constant, scalar) uniform Params {
  uint64_t dst_units;  // dst rounded down to 16 bytes
  uint64_t src;        // the source byte that goes to dst_units + first
  uint first;          // dst % 16
  uint end;            // first + bytes: where the copy ends, from dst_units
  uint units;          // 16-byte destination units the copy touches
  uint pad;
} p;

uvec4 load_unit(uint64_t at) {
  if ((at & 15ul) == 0ul) return Vector(at).v;
  const uint64_t word = at & ~3ul;
  Words w = Words(word);
  if (word == at) return uvec4(w.v[0], w.v[1], w.v[2], w.v[3]);
  // The five aligned words that hold the 16 bytes; the last one lies inside
  // the source's allocation, whose size is whole words.
  const uint shift = uint(at - word) * 8u;
  const uint a = w.v[0], b = w.v[1], c = w.v[2], d = w.v[3], e = w.v[4];
  return uvec4((a >> shift) | (b << (32u - shift)), (b >> shift) | (c << (32u - shift)),
               (c >> shift) | (d << (32u - shift)), (d >> shift) | (e << (32u - shift)));
}

void main() {
  const uint threads = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  for (uint unit = gl_GlobalInvocationID.x; unit < p.units; unit += threads) {
    const uint64_t offset = 16ul * unit;  // of the unit, from dst_units
    const uint lo = unit == 0u ? p.first : 0u;
    const uint hi = uint(min(uint64_t(p.end) - offset, 16ul));
    const uint64_t src = p.src + offset - uint64_t(p.first);
    if (lo == 0u && hi == 16u) {
      Vector(p.dst_units + offset).v = load_unit(src);
    } else {
      for (uint j = lo; j < hi; ++j) Bytes(p.dst_units + offset + j).v[0] = Bytes(src + j).v[0];
    }
  }
}
