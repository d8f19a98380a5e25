// mla_decode: the two kernels of one K3 gated-NoPE MLA decode token, in f32:
// the optional RoPE of q and the new k, then softmax attention over the KV
// rows with the optional output gate. Contracts in docs/kernels.md
// ("Module mla_decode").
#include <cstdint>

namespace {

constexpr uint32_t kSdpaThreads = 32;  // one warp per head
constexpr uint32_t kDimsPerLane = 8;   // V dims a lane accumulates per pass
constexpr uint32_t kDimsPerPass = kSdpaThreads * kDimsPerLane;

__device__ __forceinline__ float warp_sum(float v) {
  // Butterflies: every lane ends with the same bits.
#pragma unroll
  for (int m = 16; m >= 1; m /= 2) v += __shfl_xor_sync(0xffffffffu, v, m);
  return v;
}

// Rotate-half RoPE of x[0, rope_dim) by position `pos`. Angles and their
// cos/sin in f64 (rounded to f32 once), the rotation in f32 without fused
// multiply-adds, so the reference can reproduce it.
__device__ __forceinline__ void rope_rotate(float* x, uint32_t rope_dim, uint32_t pos,
                                            double theta) {
  const uint32_t half = rope_dim / 2;
  for (uint32_t i = 0; i < half; ++i) {
    const double angle = double(pos) * pow(theta, -2.0 * double(i) / double(rope_dim));
    const float c = float(cos(angle)), s = float(sin(angle));
    const float a = x[i], b = x[i + half];
    x[i] = __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s));
    x[i + half] = __fadd_rn(__fmul_rn(b, c), __fmul_rn(a, s));
  }
}

}  // namespace

// q, k: f32[heads][nope_dim + rope_dim]. use_nope != 0: nothing changes
// (NoPE). Otherwise each head's dims [nope_dim, nope_dim + rope_dim) of q and
// k are rotated in place. Grid (ceil(heads / 128)), block 128: one thread per
// head.
extern "C" __global__ void k3_mla_maybe_rope_f32(float* __restrict__ q, float* __restrict__ k,
                                                 uint32_t heads, uint32_t nope_dim,
                                                 uint32_t rope_dim, uint32_t pos, float theta,
                                                 uint32_t use_nope) {
  const uint32_t h = blockIdx.x * blockDim.x + threadIdx.x;
  if (use_nope != 0 || h >= heads || rope_dim % 2 != 0) return;
  const uint64_t base = uint64_t{h} * (nope_dim + rope_dim) + nope_dim;
  rope_rotate(q + base, rope_dim, pos, theta);
  rope_rotate(k + base, rope_dim, pos, theta);
}

// out[h] = softmax_t(q[h] . k[t][h] / sqrt(dq)) . v[t][h], times sigmoid(g[h])
// when use_gate != 0; q: [heads][dq], k: [seq_len][heads][dq],
// v: [seq_len][heads][dv], g and out: [heads][dv]. seq_len 0 writes zeros.
// Grid (heads), block 32.
extern "C" __global__ void __launch_bounds__(kSdpaThreads)
    k3_mla_sdpa_gate_f32(const float* __restrict__ q, const float* __restrict__ k,
                         const float* __restrict__ v, const float* __restrict__ g,
                         float* __restrict__ out, uint32_t seq_len, uint32_t heads, uint32_t dq,
                         uint32_t dv, uint32_t use_gate) {
  const uint32_t h = blockIdx.x, lane = threadIdx.x;
  if (h >= heads || blockDim.x != kSdpaThreads) return;
  const float scale = 1.0f / sqrtf(float(dq));
  const float* qh = q + uint64_t{h} * dq;
  // V dims in passes of 256, each an online softmax over every token.
  for (uint32_t d0 = 0; d0 < dv; d0 += kDimsPerPass) {
    float m = -INFINITY, l = 0.0f, acc[kDimsPerLane];
#pragma unroll
    for (uint32_t r = 0; r < kDimsPerLane; ++r) acc[r] = 0.0f;
    for (uint32_t t = 0; t < seq_len; ++t) {
      const float* kt = k + (uint64_t{t} * heads + h) * dq;
      float dot = 0.0f;
      for (uint32_t d = lane; d < dq; d += kSdpaThreads) dot += qh[d] * kt[d];
      const float score = warp_sum(dot) * scale;
      const float m_new = fmaxf(m, score);
      const float rescale = expf(m - m_new);  // 0 on the first token
      const float p = expf(score - m_new);
      l = l * rescale + p;
      const float* vt = v + (uint64_t{t} * heads + h) * dv;
#pragma unroll
      for (uint32_t r = 0; r < kDimsPerLane; ++r) {
        const uint32_t d = d0 + r * kSdpaThreads + lane;
        if (d < dv) acc[r] = acc[r] * rescale + p * vt[d];
      }
      m = m_new;
    }
#pragma unroll
    for (uint32_t r = 0; r < kDimsPerLane; ++r) {
      const uint32_t d = d0 + r * kSdpaThreads + lane;
      if (d >= dv) continue;
      float o = l > 0.0f ? acc[r] / l : 0.0f;
      if (use_gate != 0) o *= 1.0f / (1.0f + expf(-g[uint64_t{h} * dv + d]));
      out[uint64_t{h} * dv + d] = o;
    }
  }
}
