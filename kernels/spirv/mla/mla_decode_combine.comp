// mla_decode_combine (kernels/ptx/mla.cu; contract in docs/kernels.md,
// "Module mla", "Split-KV"): o[seq][head] = sum_z 2^(m_z - M) part_acc_z /
// (sum_z 2^(m_z - M) l_z + 2^(sink log2 e - M)) over the splits with
// l_z > 0, M the largest of their m_z and the sink (none when sinks is
// null); zeros when the denominator is 0; one rounding to bf16. Grid
// (num_q_heads, num_seqs), block 256.
//
// A workgroup per (sequence, head). The split weights are computed once,
// in parallel (a thread a split, max and sum through shared memory), into
// shared memory. The output then reads each split's row in 16-byte units
// (4 f32): thread (g, u) sums unit u over the splits g, g + G, ... (G
// groups fill the workgroup: 2 for dv = 512), 4 splits' loads in flight at
// once, and the groups' sums meet in shared memory. No value here is
// infinite (Vulkan does not promise that float arithmetic keeps them): an
// empty split's -inf max is never used, the maxima start at a finite floor.
#version 460
#extension GL_GOOGLE_include_directive : require
#include "sparkrt.glsl"
#include "sparkrt_numeric.glsl"
#include "mla_small.glsl"

layout(push_constant, scalar) uniform Params {
  F32Ptr part_acc;
  F32Ptr part_ml;
  U16Ptr o;
  F32Ptr sinks;
  uint num_q_heads;
  uint dv;
  uint num_splits;
} p;

const uint kThreads = mla_kThreads;
const uint kMaxSplits = mla_kCombineMaxSplits;
const uint kUnroll = 4;  // splits' loads in flight a thread
const float kLog2e = 1.44269504;
const float kLow = -1.0e30;  // below every base-2 score, and finite

shared float weight_s[kMaxSplits];
shared float red_s[kThreads];
shared vec4 sum_s[kThreads];

// x reduced (max or sum) over the workgroup's n <= kThreads invocations.
float reduce(float x, uint n, bool is_max) {
  const uint tid = gl_LocalInvocationIndex;
  red_s[tid] = x;
  mla_barrier();
  for (uint s = kThreads / 2u; s > 0u; s /= 2u) {
    if (tid < s && tid + s < n) {
      const float a = red_s[tid], b = red_s[tid + s];
      red_s[tid] = is_max ? max(a, b) : a + b;
    }
    mla_barrier();
  }
  const float r = red_s[0];
  mla_barrier();
  return r;
}

// The weighted sum of unit u (4 f32) of splits g, g + G, ... < n; splits of
// weight 0 are not read.
vec4 sum_splits(uint64_t acc, uint dv, uint n, uint g, uint G, uint u) {
  vec4 s = vec4(0.0);
  for (uint z0 = g; z0 < n; z0 += kUnroll * G) {
    vec4 a[kUnroll];
    float w[kUnroll];
    // Every load of the batch is issued before the first is used.
    [[unroll]] for (uint j = 0u; j < kUnroll; ++j) {
      const uint z = z0 + j * G;
      w[j] = z < n ? weight_s[z] : 0.0;
      a[j] = vec4(0.0);
      if (w[j] != 0.0) a[j] = F32x4Ptr(acc + 4ul * (uint64_t(z) * dv)).v[u];
    }
    [[unroll]] for (uint j = 0u; j < kUnroll; ++j)
      if (w[j] != 0.0) s += w[j] * a[j];
  }
  return s;
}

void store4(uint64_t dst, uint u, vec4 r) {
  U32x2Ptr(dst).v[u] = uvec2(f32_to_bf16(r.x) | (f32_to_bf16(r.y) << 16),
                             f32_to_bf16(r.z) | (f32_to_bf16(r.w) << 16));
}

void main() {
  const uint head = blockIdx.x, seq = blockIdx.y;
  const uint n = p.num_splits, threads = mla_block_threads();
  // Outside the contract: nothing is written. Uniform over the workgroup.
  if (head >= p.num_q_heads || n == 0u || n > kMaxSplits || threads > kThreads) return;
  const uint tid = gl_LocalInvocationIndex;
  const uint64_t row = uint64_t(seq) * p.num_q_heads + head;
  F32Ptr ml = F32Ptr(uint64_t(p.part_ml) + 8ul * (row * n));

  // The splits' weights 2^(m_z - M) (0 for an empty split) and the
  // denominator.
  const bool has_sink = uint64_t(p.sinks) != 0ul;
  const float sink = has_sink ? p.sinks.v[head] * kLog2e : kLow;
  float m = kLow;
  for (uint z = tid; z < n; z += threads)
    if (ml.v[2u * z + 1u] > 0.0) m = max(m, ml.v[2u * z]);
  m = max(reduce(m, threads, true), sink);
  float l = 0.0;
  for (uint z = tid; z < n; z += threads) {
    const float lz = ml.v[2u * z + 1u];
    const float w = lz > 0.0 ? exp2(ml.v[2u * z] - m) : 0.0;
    weight_s[z] = w;
    l += w * lz;
  }
  l = reduce(l, threads, false);  // its barriers also publish weight_s
  if (has_sink) l += exp2(sink - m);
  const float inv_total = l > 0.0 ? 1.0 / l : 0.0;

  const uint dv = p.dv;
  const uint64_t acc = uint64_t(p.part_acc) + 4ul * (row * n * dv);
  const uint64_t dst = uint64_t(p.o) + 2ul * (row * dv);
  if (dv % 4u == 0u && (uint64_t(p.part_acc) & 15ul) == 0ul && (uint64_t(p.o) & 7ul) == 0ul) {
    const uint units = dv / 4u;
    // G groups of `units` threads, each taking every G-th split, where the
    // row has fewer units than the workgroup threads.
    const uint groups = units == 0u ? 1u : min(threads / units, n);
    if (groups > 1u) {
      const uint g = tid / units, u = tid % units;
      sum_s[tid] = g < groups ? sum_splits(acc, dv, n, g, groups, u) : vec4(0.0);
      mla_barrier();
      if (tid < units) {
        vec4 s = sum_s[tid];
        for (uint j = 1u; j < groups; ++j) s += sum_s[j * units + tid];
        store4(dst, tid, s * inv_total);
      }
    } else {
      for (uint u = tid; u < units; u += threads)
        store4(dst, u, sum_splits(acc, dv, n, 0u, 1u, u) * inv_total);
    }
  } else {
    for (uint64_t d = tid; d < dv; d += threads) {  // 64-bit: no wrap-around for any dv
      float s = 0.0;
      for (uint z = 0u; z < n; ++z) {
        const float w = weight_s[z];
        if (w != 0.0) s += w * F32Ptr(acc + 4ul * (uint64_t(z) * dv + d)).v[0];
      }
      U16Ptr(dst + 2ul * d).v[0] = uint16_t(f32_to_bf16(s * inv_total));
    }
  }
}
