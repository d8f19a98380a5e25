// paged_decode_attn_combine (kernels/ptx/paged_attention.cu; contract in
// docs/kernels.md, "Split-KV"): out = sum_z 2^(m_z - M) part_acc_z /
// sum_z 2^(m_z - M) l_z over the splits with l_z > 0, M their largest m,
// rounded once to bf16; zeros when no split has tokens. Grid (num_q_heads,
// num_seqs), block 256: a workgroup per (sequence, head), a thread per dim,
// the splits' weights computed once in shared memory (up to 256 splits; more
// are weighed by each thread).
#version 460
#extension GL_GOOGLE_include_directive : require
#include "sparkrt.glsl"
#include "sparkrt_numeric.glsl"

layout(push_constant, scalar) uniform Params {
  F32Ptr part_acc;
  F32Ptr part_ml;
  U16Ptr out_;
  uint num_q_heads;
  uint head_dim;
  uint num_splits;
} p;

const uint kThreads = 256;
shared float weight_s[kThreads];  // 2^(m_z - M), 0 for an empty split
shared float max_s;

void main() {
  const uint tid = gl_LocalInvocationIndex;
  const uint splits = p.num_splits, dim = p.head_dim;
  if (gl_WorkGroupSize.x * gl_WorkGroupSize.y * gl_WorkGroupSize.z != kThreads || splits == 0u ||
      dim == 0u || gridDim.x != p.num_q_heads)
    return;
  const uint64_t r = uint64_t(blockIdx.y) * p.num_q_heads + blockIdx.x;
  const uint64_t ml = uint64_t(p.part_ml) + 8ul * r * splits;  // (m, l) pairs of row r
  if (tid == 0u) {
    float m = -1.0 / 0.0;
    for (uint z = 0u; z < splits; ++z)
      if (F32Ptr(ml).v[2u * z + 1u] > 0.0) m = max(m, F32Ptr(ml).v[2u * z]);
    max_s = m;
  }
  barrier();
  const float m_max = max_s;
  const bool cached = splits <= kThreads;
  if (cached && tid < splits) {
    const float l = F32Ptr(ml).v[2u * tid + 1u];
    weight_s[tid] = l > 0.0 ? exp2(F32Ptr(ml).v[2u * tid] - m_max) : 0.0;
  }
  barrier();
  for (uint d = tid; d < dim; d += kThreads) {
    float num = 0.0, den = 0.0;
    for (uint z = 0u; z < splits; ++z) {
      const float l = F32Ptr(ml).v[2u * z + 1u];
      const float w = cached ? weight_s[z] : (l > 0.0 ? exp2(F32Ptr(ml).v[2u * z] - m_max) : 0.0);
      if (w == 0.0) continue;
      num += w * F32Ptr(uint64_t(p.part_acc) + 4ul * ((r * splits + z) * dim + d)).v[0];
      den += w * l;
    }
    U16Ptr(uint64_t(p.out_) + 2ul * (r * dim + d)).v[0] =
        uint16_t(f32_to_bf16(den > 0.0 ? num / den : 0.0));
  }
}
