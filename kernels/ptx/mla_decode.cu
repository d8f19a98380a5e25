// mla_decode: the two kernels of one Kimi K3 gated-NoPE MLA decode token, in
// f32: the optional RoPE of q and the new k, then softmax attention over the
// KV rows with the optional output gate. Contracts in docs/kernels.md
// ("Module mla_decode").
#include <cstdint>

#include "sparkrt/contract/mla_decode.h"
#include "sparkrt/contract/split_kv.h"

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

// The rotation of pair i at position `pos`: the angle pos *
// theta^(-2i / rope_dim), its cos and sin in f64, each rounded to f32 once.
__device__ __forceinline__ float2 rope_cos_sin(uint32_t i, uint32_t rope_dim, uint32_t pos,
                                               double theta) {
  const double angle = double(pos) * pow(theta, -2.0 * double(i) / double(rope_dim));
  return make_float2(float(cos(angle)), float(sin(angle)));
}

// Rotate-half RoPE of the pair (a, b) = (x[i], x[i + half]), in f32 without
// fused multiply-adds, so the reference can reproduce it.
__device__ __forceinline__ float2 rope_rotate(float a, float b, float2 cs) {
  return make_float2(__fsub_rn(__fmul_rn(a, cs.x), __fmul_rn(b, cs.y)),
                     __fadd_rn(__fmul_rn(b, cs.x), __fmul_rn(a, cs.y)));
}

// Pairs whose (cos, sin) a CTA computes at once: the angles are the same
// for every head, so the CTA's threads compute them side by side (f64
// transcendentals are long).
constexpr uint32_t kRopeTablePairs = 256;
// (head, pair) items a thread loads before it stores any: the loads of
// different items are then in flight together.
constexpr uint32_t kRopeItemsInFlight = 4;

}  // namespace

// q, k: f32[heads][nope_dim + rope_dim]. use_nope != 0: nothing changes
// (NoPE). Otherwise each head's dims [nope_dim, nope_dim + rope_dim) of q and
// k are rotated in place. Grid (ceil(heads / 128)), block 128: CTA x rotates
// heads [128x, 128x + 128), its threads spread over the (head, pair) items.
extern "C" __global__ void k3_mla_maybe_rope_f32(float* __restrict__ q, float* __restrict__ k,
                                                 uint32_t heads, uint32_t nope_dim,
                                                 uint32_t rope_dim, uint32_t pos, float theta,
                                                 uint32_t use_nope) {
  __shared__ float2 table[kRopeTablePairs];
  if (use_nope != 0 || rope_dim % 2 != 0) return;  // uniform: before any barrier
  const uint32_t half = rope_dim / 2, h0 = blockIdx.x * blockDim.x;
  const uint32_t cta_heads = h0 < heads ? min(blockDim.x, heads - h0) : 0;
  const uint64_t row = uint64_t{nope_dim} + rope_dim;
  for (uint32_t i0 = 0; i0 < half; i0 += kRopeTablePairs) {
    const uint32_t n = min(kRopeTablePairs, half - i0);
    for (uint32_t j = threadIdx.x; j < n; j += blockDim.x)
      table[j] = rope_cos_sin(i0 + j, rope_dim, pos, theta);
    __syncthreads();
    const uint32_t items = cta_heads * n;  // item = head * n + pair
    for (uint32_t first = threadIdx.x; first < items; first += kRopeItemsInFlight * blockDim.x) {
      float2 qv[kRopeItemsInFlight], kv[kRopeItemsInFlight];
      uint64_t at[kRopeItemsInFlight];
      uint32_t pair[kRopeItemsInFlight];
#pragma unroll
      for (uint32_t u = 0; u < kRopeItemsInFlight; ++u) {
        const uint32_t it = min(first + u * blockDim.x, items - 1);  // a repeat is harmless
        pair[u] = it % n;
        at[u] = (h0 + it / n) * row + nope_dim + i0 + pair[u];
        qv[u] = make_float2(q[at[u]], q[at[u] + half]);
        kv[u] = make_float2(k[at[u]], k[at[u] + half]);
      }
#pragma unroll
      for (uint32_t u = 0; u < kRopeItemsInFlight; ++u) {
        if (first + u * blockDim.x >= items) continue;
        const float2 qr = rope_rotate(qv[u].x, qv[u].y, table[pair[u]]);
        const float2 kr = rope_rotate(kv[u].x, kv[u].y, table[pair[u]]);
        q[at[u]] = qr.x;
        q[at[u] + half] = qr.y;
        k[at[u]] = kr.x;
        k[at[u] + half] = kr.y;
      }
    }
    __syncthreads();  // the table is written again for the next pairs
  }
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

// ── split-KV attention ──────────────────────────────────────────────────────
//
// The seed's kernel gives a head one warp, which keeps a few KB in flight per
// head: 64 heads reach ~3% of the memory rate. Here a head's tokens are cut
// into num_splits ranges, each a CTA of 8 warps. A warp takes kStepTokens
// consecutive tokens a step and issues all their K and V loads (16 bytes a
// lane) before it uses any, so a CTA has ~40 KB in flight; each token's score
// is one warp reduction. The warps' softmax states meet in shared memory at
// the end, and the CTA writes unnormalized partials that
// k3_mla_sdpa_combine_f32 merges per head. Scores are in base 2 (exp2 is one
// instruction).
namespace {

namespace split_kv = sparkrt::contract::split_kv;
constexpr uint32_t kSplitThreads = contract::kSplitThreads;
constexpr uint32_t kSplitWarps = kSplitThreads / 32;
constexpr uint32_t kStepTokens = 4;  // tokens a warp loads at once
constexpr uint32_t kVChunks = 2;     // float4 V chunks a lane owns per pass
constexpr uint32_t kPassDims = 32 * 4 * kVChunks;
constexpr float kLog2e = 1.4426950408889634f;

// Dims [4c, 4c + 4) of an n-float row (zeros past n); one 16-byte load
// when `vec` (n % 4 == 0 and the row 16-byte aligned).
__device__ __forceinline__ float4 load_chunk(const float* __restrict__ row, uint32_t c, uint32_t n,
                                             bool vec) {
  if (vec) return __ldg(reinterpret_cast<const float4*>(row) + c);
  const uint32_t d = 4 * c;
  return make_float4(d < n ? __ldg(row + d) : 0.0f, d + 1 < n ? __ldg(row + d + 1) : 0.0f,
                     d + 2 < n ? __ldg(row + d + 2) : 0.0f, d + 3 < n ? __ldg(row + d + 3) : 0.0f);
}

__device__ __forceinline__ float dot4(float4 a, float4 b, float acc) {
  return fmaf(a.w, b.w, fmaf(a.z, b.z, fmaf(a.y, b.y, fmaf(a.x, b.x, acc))));
}

__device__ __forceinline__ void axpy4(float p, float4 x, float4& acc) {
  acc.x = fmaf(p, x.x, acc.x);
  acc.y = fmaf(p, x.y, acc.y);
  acc.z = fmaf(p, x.z, acc.z);
  acc.w = fmaf(p, x.w, acc.w);
}

__device__ __forceinline__ float4 scale4(float4 x, float s) {
  return make_float4(x.x * s, x.y * s, x.z * s, x.w * s);
}

// 2^(m - m_new), 0 where m is -inf (nothing seen yet).
__device__ __forceinline__ float rescale_of(float m, float m_new) {
  return m == -INFINITY ? 0.0f : exp2f(m - m_new);
}

}  // namespace

// Grid (heads, num_splits), block kSplitThreads; partials as the contract
// says. Any other block, dq == 0 or dq > kSplitMaxDq returns without writing.
extern "C" __global__ void __launch_bounds__(kSplitThreads)
    k3_mla_sdpa_split_f32(const float* __restrict__ q, const float* __restrict__ k,
                          const float* __restrict__ v, float* __restrict__ part_acc,
                          float* __restrict__ part_ml, uint32_t seq_len, uint32_t heads,
                          uint32_t dq, uint32_t dv, uint32_t num_splits) {
  __shared__ float4 q_s[contract::kSplitMaxDq / 4];
  __shared__ float warp_ml[kSplitWarps][2];
  __shared__ float warp_acc[kSplitWarps][kPassDims];
  const uint32_t h = blockIdx.x, z = blockIdx.y, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (h >= heads || z >= num_splits || blockDim.x != kSplitThreads || dq == 0 ||
      dq > contract::kSplitMaxDq)
    return;
  const split_kv::TokenRange range = split_kv::token_range(seq_len, 0, num_splits, z);
  const uint32_t q_chunks = (dq + 3) / 4, v_chunks = (dv + 3) / 4;
  const bool vec_k = dq % 4 == 0 && ((reinterpret_cast<uintptr_t>(q) |
                                      reinterpret_cast<uintptr_t>(k)) % 16) == 0;
  const bool vec_v = dv % 4 == 0 && reinterpret_cast<uintptr_t>(v) % 16 == 0;
  for (uint32_t c = threadIdx.x; c < q_chunks; c += kSplitThreads)
    q_s[c] = load_chunk(q + uint64_t{h} * dq, c, dq, vec_k);
  __syncthreads();
  const float score_scale = kLog2e / sqrtf(float(dq));
  const uint64_t k_tok = uint64_t{heads} * dq, v_tok = uint64_t{heads} * dv;
  float* acc_out = part_acc + (uint64_t{h} * num_splits + z) * dv;

  // V dims in passes of kPassDims (one pass for dv <= 256); each pass is the
  // whole online softmax again, so m and l come out the same every pass.
  for (uint32_t c0 = 0; c0 < v_chunks; c0 += kPassDims / 4) {
    float m = -INFINITY, l = 0.0f;
    float4 acc[kVChunks];
#pragma unroll
    for (uint32_t j = 0; j < kVChunks; ++j) acc[j] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (uint32_t t = range.t0 + warp * kStepTokens; t < range.t1;
         t += kSplitWarps * kStepTokens) {
      const uint32_t n = min(kStepTokens, range.t1 - t);
      // Every load of the step first: V does not depend on the scores.
      float4 vb[kStepTokens][kVChunks];
#pragma unroll
      for (uint32_t u = 0; u < kStepTokens; ++u) {
        const float* vrow = v + (t + u) * v_tok + uint64_t{h} * dv;
#pragma unroll
        for (uint32_t j = 0; j < kVChunks; ++j) {
          const uint32_t c = c0 + 32 * j + lane;
          vb[u][j] = u < n && c < v_chunks ? load_chunk(vrow, c, dv, vec_v)
                                           : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
      }
      float s[kStepTokens];
#pragma unroll
      for (uint32_t u = 0; u < kStepTokens; ++u) s[u] = 0.0f;
#pragma unroll 2
      for (uint32_t c = lane; c < q_chunks; c += 32) {
        const float4 qc = q_s[c];
        float4 kb[kStepTokens];
#pragma unroll
        for (uint32_t u = 0; u < kStepTokens; ++u)
          kb[u] = u < n ? load_chunk(k + (t + u) * k_tok + uint64_t{h} * dq, c, dq, vec_k)
                        : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
        for (uint32_t u = 0; u < kStepTokens; ++u) s[u] = dot4(qc, kb[u], s[u]);
      }
      float m_new = m;
#pragma unroll
      for (uint32_t u = 0; u < kStepTokens; ++u) {
        s[u] = warp_sum(s[u]) * score_scale;
        if (u < n) m_new = fmaxf(m_new, s[u]);
      }
      const float alpha = rescale_of(m, m_new);
      l *= alpha;
#pragma unroll
      for (uint32_t j = 0; j < kVChunks; ++j) acc[j] = scale4(acc[j], alpha);
#pragma unroll
      for (uint32_t u = 0; u < kStepTokens; ++u) {
        const float p = u < n ? exp2f(s[u] - m_new) : 0.0f;
        l += p;
#pragma unroll
        for (uint32_t j = 0; j < kVChunks; ++j) axpy4(p, vb[u][j], acc[j]);
      }
      m = m_new;
    }
    // The warps' states meet: thread i merges pass dim i.
    if (lane == 0) {
      warp_ml[warp][0] = m;
      warp_ml[warp][1] = l;
    }
#pragma unroll
    for (uint32_t j = 0; j < kVChunks; ++j)
      reinterpret_cast<float4*>(warp_acc[warp])[32 * j + lane] = acc[j];
    __syncthreads();
    float m_cta = -INFINITY;
#pragma unroll
    for (uint32_t w = 0; w < kSplitWarps; ++w) m_cta = fmaxf(m_cta, warp_ml[w][0]);
    float l_cta = 0.0f, o = 0.0f;
#pragma unroll
    for (uint32_t w = 0; w < kSplitWarps; ++w) {
      const float wt = rescale_of(warp_ml[w][0], m_cta);
      l_cta = fmaf(wt, warp_ml[w][1], l_cta);
      o = fmaf(wt, warp_acc[w][threadIdx.x], o);
    }
    const uint32_t d = 4 * c0 + threadIdx.x;
    if (d < dv) acc_out[d] = o;
    if (c0 == 0 && threadIdx.x == 0) {
      float* ml = part_ml + (uint64_t{h} * num_splits + z) * 2;
      ml[0] = m_cta;
      ml[1] = l_cta;
    }
    __syncthreads();  // warp_acc is written again by the next pass
  }
}

// out[h][d] = sum_z 2^(m_z - M) part_acc[h][z][d] / sum_z 2^(m_z - M) l_z
// over the splits with l_z > 0 (M their largest m_z; zeros when none), times
// sigmoid(g[h][d]) when use_gate. Grid (heads), block kCombineThreads; any
// other block or num_splits > kMaxSplits returns without writing.
extern "C" __global__ void __launch_bounds__(contract::kCombineThreads)
    k3_mla_sdpa_combine_f32(const float* __restrict__ part_acc, const float* __restrict__ part_ml,
                            const float* __restrict__ g, float* __restrict__ out, uint32_t heads,
                            uint32_t dv, uint32_t num_splits, uint32_t use_gate) {
  __shared__ float weight[contract::kMaxSplits];
  __shared__ float red[contract::kCombineThreads / 32][2];
  const uint32_t h = blockIdx.x, i = threadIdx.x;
  if (h >= heads || blockDim.x != contract::kCombineThreads || num_splits > contract::kMaxSplits)
    return;
  const float* ml = part_ml + uint64_t{h} * num_splits * 2;
  const bool live = i < num_splits && ml[2 * i + 1] > 0.0f;
  const float mi = live ? ml[2 * i] : -INFINITY;
  // The largest live max, then the denominator, over the CTA.
  float m = mi;
#pragma unroll
  for (int s = 16; s >= 1; s /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, s));
  if (i % 32 == 0) red[i / 32][0] = m;
  __syncthreads();
  m = red[0][0];
#pragma unroll
  for (uint32_t w = 1; w < contract::kCombineThreads / 32; ++w) m = fmaxf(m, red[w][0]);
  const float wi = live ? exp2f(mi - m) : 0.0f;
  weight[i] = wi;
  const float li = warp_sum(live ? wi * ml[2 * i + 1] : 0.0f);
  if (i % 32 == 0) red[i / 32][1] = li;
  __syncthreads();
  float total = 0.0f;
#pragma unroll
  for (uint32_t w = 0; w < contract::kCombineThreads / 32; ++w) total += red[w][1];
  const float* acc = part_acc + uint64_t{h} * num_splits * dv;
  for (uint32_t d = i; d < dv; d += contract::kCombineThreads) {
    float o = 0.0f;
    for (uint32_t zz = 0; zz < num_splits; ++zz)
      if (weight[zz] > 0.0f) o = fmaf(weight[zz], acc[uint64_t{zz} * dv + d], o);
    o = total > 0.0f ? o / total : 0.0f;
    if (use_gate != 0) o *= 1.0f / (1.0f + expf(-g[uint64_t{h} * dv + d]));
    out[uint64_t{h} * dv + d] = o;
  }
}
