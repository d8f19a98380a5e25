// fill_slots_from_block_table (kernels/ptx/kv_cache.cu; contract in
// docs/kernels.md, "Module kv_cache"): the slots of one sequence's positions
// start_pos .. start_pos + count - 1,
//   slots[i] = block_table[pos / block_size] * block_size + pos % block_size,
// pos = start_pos + i in u32 as in the CUDA kernel. Grid ceil(count / 256), block 256.
#version 460
#extension GL_GOOGLE_include_directive : require
#include "sparkrt.glsl"
#include "sparkrt_numeric.glsl"

layout(push_constant, scalar) uniform Params {
  I64Ptr slots;
  I32Ptr block_table;
  uint start_pos;
  uint count;
  uint block_size;
} p;

void main() {
  const uint i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= p.count) return;
  const uint pos = p.start_pos + i;
  // Addresses in 64 bits: an index past 2^31 would be negative in an access chain.
  const int block = I32Ptr(uint64_t(p.block_table) + 4ul * (pos / p.block_size)).v[0];
  I64Ptr(uint64_t(p.slots) + 8ul * i).v[0] =
      int64_t(block) * int64_t(p.block_size) + int64_t(pos % p.block_size);
}
