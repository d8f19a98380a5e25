// mla_decode: the two kernels of one Kimi K3 gated-NoPE MLA decode token, in
// f32: the optional RoPE of q and the new k, then softmax attention over the
// KV rows with the optional output gate. Contracts in docs/kernels.md
// ("Module mla_decode").
#include <cstdint>

#include "sparkrt/contract/mla_decode.h"

namespace {

namespace contract = sparkrt::contract::mla_decode;
constexpr uint32_t kSdpaThreads = contract::kSdpaThreads;  // one warp per head
constexpr uint32_t kDimsPerLane = contract::kDimsPerLane;  // V dims a lane accumulates per pass
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
// Grid (heads), block 32: one warp per head walks the tokens in blocks of 32.
// Lane j scores token j of a block over the whole row (its loads are all
// independent; q comes from L1), then every lane accumulates its V dims over
// the block's tokens, the probabilities broadcast by shuffles: an online
// softmax (f32) over the blocks.
extern "C" __global__ void __launch_bounds__(kSdpaThreads)
    k3_mla_sdpa_gate_f32(const float* __restrict__ q, const float* __restrict__ k,
                         const float* __restrict__ v, const float* __restrict__ g,
                         float* __restrict__ out, uint32_t seq_len, uint32_t heads, uint32_t dq,
                         uint32_t dv, uint32_t use_gate) {
  const uint32_t h = blockIdx.x, lane = threadIdx.x;
  if (h >= heads || blockDim.x != kSdpaThreads) return;
  const float scale = 1.0f / sqrtf(float(dq));
  const float* qh = q + uint64_t{h} * dq;
  // Whole 16-byte pieces when every row allows it.
  const bool vec4 =
      dq % 4 == 0 && (reinterpret_cast<uintptr_t>(q) | reinterpret_cast<uintptr_t>(k)) % 16 == 0;
  // V dims in passes of 256, each an online softmax over every token.
  for (uint32_t d0 = 0; d0 < dv; d0 += kDimsPerPass) {
    float m = -INFINITY, l = 0.0f, acc[kDimsPerLane];
#pragma unroll
    for (uint32_t r = 0; r < kDimsPerLane; ++r) acc[r] = 0.0f;
    for (uint32_t t0 = 0; t0 < seq_len; t0 += kSdpaThreads) {
      const uint32_t nb = min(kSdpaThreads, seq_len - t0);
      float score = -INFINITY;
      if (lane < nb) {
        const float* kt = k + (uint64_t{t0 + lane} * heads + h) * dq;
        float dot[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        if (vec4) {
#pragma unroll 8
          for (uint32_t d = 0; d < dq; d += 4) {
            const float4 a = *reinterpret_cast<const float4*>(qh + d);
            const float4 b = *reinterpret_cast<const float4*>(kt + d);
            dot[0] += a.x * b.x;
            dot[1] += a.y * b.y;
            dot[2] += a.z * b.z;
            dot[3] += a.w * b.w;
          }
        } else {
          for (uint32_t d = 0; d < dq; ++d) dot[0] += qh[d] * kt[d];
        }
        score = (dot[0] + dot[1] + (dot[2] + dot[3])) * scale;
      }
      float bm = score;
#pragma unroll
      for (int s = 16; s >= 1; s /= 2) bm = fmaxf(bm, __shfl_xor_sync(0xffffffffu, bm, s));
      const float m_new = fmaxf(m, bm);
      const float rescale = expf(m - m_new);  // 0 on the first block
      const float p = lane < nb ? expf(score - m_new) : 0.0f;
      l = l * rescale + warp_sum(p);
      m = m_new;
#pragma unroll
      for (uint32_t r = 0; r < kDimsPerLane; ++r) acc[r] *= rescale;
      const float* vt = v + uint64_t{t0} * heads * dv + uint64_t{h} * dv + d0 + lane;
      const uint64_t v_step = uint64_t{heads} * dv;
#pragma unroll 4
      for (uint32_t j = 0; j < nb; ++j) {
        const float pj = __shfl_sync(0xffffffffu, p, j);
#pragma unroll
        for (uint32_t r = 0; r < kDimsPerLane; ++r)
          if (d0 + r * kSdpaThreads + lane < dv) acc[r] += pj * vt[j * v_step + r * kSdpaThreads];
      }
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
