// turbo_paged_attention: decode attention (one query token per sequence)
// over a paged BF16 K pool and a TurboQuant V pool (2/3/4-bit Lloyd-Max
// values with an FP8 E4M3 scale per 16). Contracts in docs/kernels.md
// ("Module turbo_paged_attention").
//
// Design. A CTA of 8 warps serves `hpc` (up to 8) query heads that share one
// KV head, so every K and V row is read once for all of them. Each warp walks
// chunks of 32 tokens: first each lane takes one token, reads its whole K row
// with 16-byte loads and scores it against every head's q (held in shared
// memory, read as broadcasts), so scores need no shuffles; then the warp's
// online softmax (base 2) per head; then each lane owns head_dim / 32
// consecutive V dims (one 16-value group's share) and, token by token,
// dequantizes them from the packed bytes (codebook in shared memory) and
// accumulates them weighted by the token's probabilities. The warps' results
// are merged through shared memory at the end. Exact attention over the
// dequantized V: no V row is skipped.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "sparkrt/contract/turbo_paged_attention.h"
#include "sparkrt_kernel_utils.cuh"

namespace {

namespace contract = sparkrt::contract::turbo_paged_attention;
namespace format = sparkrt::contract::turbo_kv_cache;
constexpr uint32_t kThreads = contract::kThreads;
constexpr uint32_t kWarps = contract::kWarps;
constexpr uint32_t kMaxHpc = contract::kMaxHeadsPerCta;
constexpr uint32_t kMaxHeadDim = contract::kMaxHeadDim;
constexpr float kLog2e = 1.4426950408889634f;
constexpr uint32_t kFull = 0xffffffffu;

struct Params {
  const __nv_bfloat16* q;
  const __nv_bfloat16* k_cache;
  const uint8_t* v_cache;
  __nv_bfloat16* out;  // one pass
  float* part_acc;     // split: [num_seqs][num_q_heads][num_splits][head_dim]
  float* part_ml;      // split: [num_seqs][num_q_heads][num_splits][2]
  const int32_t* block_tables;
  const int32_t* seq_lens;
  uint32_t max_blocks_per_seq, num_q_heads, num_kv_heads, head_dim, block_size;
  float inv_sqrt_d;
  uint32_t q_stride;
  uint64_t v_block_stride_bytes, v_data_section_bytes;
  uint32_t sliding_window, num_splits;  // num_splits 0: one pass
};

struct Smem {
  float q[kMaxHpc][kMaxHeadDim];          // the heads' q as f32
  float p[kWarps][kMaxHpc][32];           // a chunk's probabilities per warp
  const uint8_t* v_row[kWarps][32];       // a chunk's packed V values of this KV head
  const uint8_t* v_scales[kWarps][32];    // and their scales
  float codebook[16];
  float acc[kMaxHpc][kMaxHeadDim];        // the warps' merged outputs
  float ml[kWarps][kMaxHpc][2];           // each warp's (max, sum) per head
};

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int m = 16; m >= 1; m /= 2) v = fmaxf(v, __shfl_xor_sync(kFull, v, m));
  return v;
}
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int m = 16; m >= 1; m /= 2) v += __shfl_xor_sync(kFull, v, m);
  return v;
}

// kBits: V bits per value; kDpl: V dims per lane (head_dim / 32).
template <uint32_t kBits, uint32_t kDpl>
__device__ __forceinline__ void decode(const Params& p, uint32_t hpc, uint32_t kvh, Smem& sm) {
  const uint32_t lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const uint32_t D = kDpl * 32;
  const uint32_t seq = blockIdx.y, head0 = blockIdx.x * hpc;

  const int32_t sl = p.seq_lens[seq];
  const uint64_t cap = uint64_t{p.max_blocks_per_seq} * p.block_size;
  const uint32_t len = sl <= 0 ? 0u : uint32_t(uint64_t(sl) < cap ? uint64_t(sl) : cap);
  const contract::TokenRange range =
      contract::token_range(len, p.sliding_window, p.num_splits, blockIdx.z);
  const uint32_t t0 = range.t0, t1 = range.t1;

  for (uint32_t i = threadIdx.x; i < hpc * D; i += kThreads) {
    const uint32_t h = i / D, d = i % D;
    sm.q[h][d] = __bfloat162float(p.q[uint64_t{seq} * p.q_stride + uint64_t{head0 + h} * D + d]);
  }
  if (threadIdx.x < format::codebook_size(kBits))
    sm.codebook[threadIdx.x] = format::centroid(kBits, threadIdx.x);
  __syncthreads();

  const sparkrt_kernels::BlockDiv bdiv(p.block_size);
  const int32_t* bt = p.block_tables + uint64_t{seq} * p.max_blocks_per_seq;
  const uint32_t row = p.num_kv_heads * D;  // K elements per token
  const uint64_t k_block = uint64_t{p.block_size} * row;
  const uint64_t v_token_data = uint64_t{row} * kBits / 8, v_token_scales = row / 16;
  const float score_scale = p.inv_sqrt_d * kLog2e;
  const uint32_t d0 = lane * kDpl;  // this lane's V dims in the PV phase

  float m_run[kMaxHpc], l_run[kMaxHpc], o[kMaxHpc][kDpl];
#pragma unroll
  for (uint32_t h = 0; h < kMaxHpc; ++h) {
    m_run[h] = -INFINITY;
    l_run[h] = 0.f;
#pragma unroll
    for (uint32_t i = 0; i < kDpl; ++i) o[h][i] = 0.f;
  }

  for (uint32_t base = t0 + warp * 32; base < t1; base += kWarps * 32) {
    // Scores: lane = token.
    const uint32_t tok = base + lane;
    const bool on = tok < t1;
    float s[kMaxHpc];
#pragma unroll
    for (uint32_t h = 0; h < kMaxHpc; ++h) s[h] = 0.f;
    if (on) {
      const uint32_t b = uint32_t(bt[bdiv.div(tok)]), o_tok = bdiv.mod(tok);
      const uint4* k = reinterpret_cast<const uint4*>(p.k_cache + b * k_block +
                                                       uint64_t{o_tok} * row + kvh * D);
      sm.v_row[warp][lane] = p.v_cache + b * p.v_block_stride_bytes + o_tok * v_token_data +
                             kvh * (uint64_t{D} * kBits / 8);
      sm.v_scales[warp][lane] = p.v_cache + b * p.v_block_stride_bytes + p.v_data_section_bytes +
                                o_tok * v_token_scales + kvh * (D / 16);
#pragma unroll 4
      for (uint32_t c = 0; c < D / 8; ++c) {
        float kf[8];
        sparkrt_kernels::bf16x8_to_float(__ldg(k + c), kf);
#pragma unroll
        for (uint32_t h = 0; h < kMaxHpc; ++h) {
          if (h >= hpc) break;
          const float4 qa = *reinterpret_cast<const float4*>(&sm.q[h][8 * c]);
          const float4 qb = *reinterpret_cast<const float4*>(&sm.q[h][8 * c + 4]);
          s[h] += qa.x * kf[0] + qa.y * kf[1] + qa.z * kf[2] + qa.w * kf[3] + qb.x * kf[4] +
                  qb.y * kf[5] + qb.z * kf[6] + qb.w * kf[7];
        }
      }
    }
    // Online softmax per head over the chunk.
#pragma unroll
    for (uint32_t h = 0; h < kMaxHpc; ++h) {
      if (h >= hpc) break;
      const float sc = on ? s[h] * score_scale : -INFINITY;
      const float m_new = fmaxf(m_run[h], warp_max(sc));  // finite: the chunk has a token
      const float alpha = exp2f(m_run[h] - m_new);
      const float pr = on ? exp2f(sc - m_new) : 0.f;
      m_run[h] = m_new;
      l_run[h] = l_run[h] * alpha + pr;
      sm.p[warp][h][lane] = pr;
#pragma unroll
      for (uint32_t i = 0; i < kDpl; ++i) o[h][i] *= alpha;
    }
    __syncwarp();
    // PV: lane = dims [d0, d0 + kDpl), whose kDpl * kBits bits start at bit
    // d0 * kBits of the head's packed row: one or two aligned 32-bit words
    // (rows start on 4-byte boundaries). The words and scales of kBatch
    // tokens are loaded before any is used, so their loads overlap.
    const uint32_t n = t1 - base < 32 ? t1 - base : 32;
    const uint32_t bit0 = d0 * kBits, word0 = bit0 / 32, shift = bit0 % 32;
    const bool two_words = shift + kDpl * kBits > 32;
    constexpr uint32_t kBatch = 8;
    for (uint32_t j0 = 0; j0 < n; j0 += kBatch) {
      uint32_t lo[kBatch], hi[kBatch];
      float scale[kBatch];
#pragma unroll
      for (uint32_t u = 0; u < kBatch; ++u) {
        lo[u] = hi[u] = 0;
        scale[u] = 0.f;
        if (j0 + u < n) {
          const uint32_t* w = reinterpret_cast<const uint32_t*>(sm.v_row[warp][j0 + u]) + word0;
          lo[u] = __ldg(w);
          if (two_words) hi[u] = __ldg(w + 1);
          scale[u] = sparkrt_kernels::fp8_to_float_bits(__ldg(sm.v_scales[warp][j0 + u] + d0 / 16));
        }
      }
#pragma unroll
      for (uint32_t u = 0; u < kBatch; ++u) {
        if (j0 + u >= n) break;
        const uint64_t w = ((uint64_t{hi[u]} << 32) | lo[u]) >> shift;
        float ps[kMaxHpc];
#pragma unroll
        for (uint32_t h = 0; h < kMaxHpc; ++h) ps[h] = h < hpc ? sm.p[warp][h][j0 + u] * scale[u] : 0.f;
#pragma unroll
        for (uint32_t i = 0; i < kDpl; ++i) {
          const float c = sm.codebook[uint32_t(w >> (i * kBits)) & ((1u << kBits) - 1u)];
#pragma unroll
          for (uint32_t h = 0; h < kMaxHpc; ++h) {
            if (h >= hpc) break;
            o[h][i] += ps[h] * c;
          }
        }
      }
    }
    __syncwarp();
  }

  // Merge the warps: a common max per head, then the scaled sums.
#pragma unroll
  for (uint32_t h = 0; h < kMaxHpc; ++h) {
    if (h >= hpc) break;
    const float l = warp_sum(l_run[h]);
    if (lane == 0) {
      sm.ml[warp][h][0] = m_run[h];
      sm.ml[warp][h][1] = l;
    }
  }
  for (uint32_t i = threadIdx.x; i < hpc * D; i += kThreads) sm.acc[i / D][i % D] = 0.f;
  __syncthreads();
  float m_cta[kMaxHpc], l_cta[kMaxHpc], f[kMaxHpc];
#pragma unroll
  for (uint32_t h = 0; h < kMaxHpc; ++h) {
    if (h >= hpc) break;
    float m = -INFINITY;
    for (uint32_t w = 0; w < kWarps; ++w) m = fmaxf(m, sm.ml[w][h][0]);
    float l = 0.f;
    if (m != -INFINITY)
      for (uint32_t w = 0; w < kWarps; ++w) l += exp2f(sm.ml[w][h][0] - m) * sm.ml[w][h][1];
    m_cta[h] = m;
    l_cta[h] = l;
    f[h] = m == -INFINITY ? 0.f : exp2f(m_run[h] - m);  // 0 for a warp without tokens
  }
  for (uint32_t w = 0; w < kWarps; ++w) {
    if (warp == w) {
#pragma unroll
      for (uint32_t h = 0; h < kMaxHpc; ++h) {
        if (h >= hpc) break;
#pragma unroll
        for (uint32_t i = 0; i < kDpl; ++i) sm.acc[h][d0 + i] += o[h][i] * f[h];
      }
    }
    __syncthreads();
  }
  for (uint32_t i = threadIdx.x; i < hpc * D; i += kThreads) {
    const uint32_t h = i / D, d = i % D;
    const uint64_t qrow = uint64_t{seq} * p.num_q_heads + head0 + h;
    float lh = 0.f;
#pragma unroll
    for (uint32_t k = 0; k < kMaxHpc; ++k)
      if (k == h) lh = l_cta[k];
    if (p.num_splits == 0) {
      p.out[qrow * D + d] = __float2bfloat16_rn(lh > 0.f ? sm.acc[h][d] / lh : 0.f);
    } else {
      p.part_acc[(qrow * p.num_splits + blockIdx.z) * D + d] = sm.acc[h][d];
    }
  }
  if (p.num_splits != 0 && threadIdx.x < hpc) {
    const uint32_t h = threadIdx.x;
    float mh = -INFINITY, lh = 0.f;
#pragma unroll
    for (uint32_t k = 0; k < kMaxHpc; ++k)
      if (k == h) {
        mh = m_cta[k];
        lh = l_cta[k];
      }
    const uint64_t prow = (uint64_t{seq} * p.num_q_heads + head0 + h) * p.num_splits + blockIdx.z;
    p.part_ml[2 * prow] = mh;
    p.part_ml[2 * prow + 1] = lh;
  }
}

// Checks the launch against the contract (returns without writing outside
// it; the op validates first) and picks the instance for head_dim.
template <uint32_t kBits>
__device__ __forceinline__ void dispatch(const Params& p) {
  __shared__ __align__(16) Smem sm;
  const uint32_t hpc = p.num_q_heads / gridDim.x;
  if (!contract::valid_head_dim(p.head_dim) || p.num_kv_heads == 0 || p.block_size == 0 ||
      hpc == 0 || hpc > kMaxHpc || hpc * gridDim.x != p.num_q_heads ||
      p.num_q_heads % p.num_kv_heads != 0 || (p.num_q_heads / p.num_kv_heads) % hpc != 0 ||
      blockDim.x != kThreads || p.num_splits > 65535 ||
      ((reinterpret_cast<uintptr_t>(p.v_cache) | p.v_block_stride_bytes) % 4) != 0)
    return;
  const uint32_t kvh = blockIdx.x * hpc / (p.num_q_heads / p.num_kv_heads);
  if (p.head_dim == 64) return decode<kBits, 2>(p, hpc, kvh, sm);
  if (p.head_dim == 128) return decode<kBits, 4>(p, hpc, kvh, sm);
  return decode<kBits, 8>(p, hpc, kvh, sm);
}

__device__ __forceinline__ Params make_params(
    const __nv_bfloat16* q, const __nv_bfloat16* k_cache, const uint8_t* v_cache,
    const int32_t* block_tables, const int32_t* seq_lens, uint32_t max_blocks_per_seq,
    uint32_t num_q_heads, uint32_t num_kv_heads, uint32_t head_dim, uint32_t block_size,
    float inv_sqrt_d, uint32_t q_stride, uint64_t v_block_stride_bytes,
    uint64_t v_data_section_bytes, uint32_t sliding_window) {
  Params p{};
  p.q = q;
  p.k_cache = k_cache;
  p.v_cache = v_cache;
  p.block_tables = block_tables;
  p.seq_lens = seq_lens;
  p.max_blocks_per_seq = max_blocks_per_seq;
  p.num_q_heads = num_q_heads;
  p.num_kv_heads = num_kv_heads;
  p.head_dim = head_dim;
  p.block_size = block_size;
  p.inv_sqrt_d = inv_sqrt_d;
  p.q_stride = q_stride;
  p.v_block_stride_bytes = v_block_stride_bytes;
  p.v_data_section_bytes = v_data_section_bytes;
  p.sliding_window = sliding_window;
  return p;
}

}  // namespace

// One pass: out[seq][head] = softmax(q K^T * inv_sqrt_d) V over the
// sequence's tokens (its window's, with sliding_window > 0). Grid
// (num_q_heads / hpc, num_seqs), block 256.
#define SPARKRT_TURBO_DECODE(bits)                                                               \
  extern "C" __global__ void __launch_bounds__(kThreads) paged_decode_attn_bf16k_turbo##bits##v( \
      const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ k_cache,            \
      const uint8_t* __restrict__ v_cache, __nv_bfloat16* __restrict__ out,                      \
      const int32_t* __restrict__ block_tables, const int32_t* __restrict__ seq_lens,            \
      uint32_t max_blocks_per_seq, uint32_t num_q_heads, uint32_t num_kv_heads,                  \
      uint32_t head_dim, uint32_t block_size, float inv_sqrt_d, uint32_t q_stride,               \
      uint64_t v_block_stride_bytes, uint64_t v_data_section_bytes, uint32_t sliding_window) {   \
    Params p = make_params(q, k_cache, v_cache, block_tables, seq_lens, max_blocks_per_seq,      \
                           num_q_heads, num_kv_heads, head_dim, block_size, inv_sqrt_d,          \
                           q_stride, v_block_stride_bytes, v_data_section_bytes, sliding_window); \
    p.out = out;                                                                                 \
    dispatch<bits>(p);                                                                           \
  }                                                                                              \
  /* Split z = blockIdx.z of num_splits: the unnormalised partials, merged by */                 \
  /* paged_attention.paged_decode_attn_combine. Grid (num_q_heads / hpc, num_seqs, */            \
  /* num_splits), block 256. */                                                                  \
  extern "C" __global__ void __launch_bounds__(kThreads)                                        \
      paged_decode_attn_bf16k_turbo##bits##v_split(                                              \
          const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ k_cache,        \
          const uint8_t* __restrict__ v_cache, float* __restrict__ part_acc,                     \
          float* __restrict__ part_ml, const int32_t* __restrict__ block_tables,                 \
          const int32_t* __restrict__ seq_lens, uint32_t max_blocks_per_seq,                     \
          uint32_t num_q_heads, uint32_t num_kv_heads, uint32_t head_dim, uint32_t block_size,   \
          float inv_sqrt_d, uint32_t q_stride, uint64_t v_block_stride_bytes,                    \
          uint64_t v_data_section_bytes, uint32_t sliding_window, uint32_t num_splits) {         \
    if (num_splits == 0 || blockIdx.z >= num_splits) return;                                     \
    Params p = make_params(q, k_cache, v_cache, block_tables, seq_lens, max_blocks_per_seq,      \
                           num_q_heads, num_kv_heads, head_dim, block_size, inv_sqrt_d,          \
                           q_stride, v_block_stride_bytes, v_data_section_bytes, sliding_window); \
    p.part_acc = part_acc;                                                                       \
    p.part_ml = part_ml;                                                                         \
    p.num_splits = num_splits;                                                                   \
    dispatch<bits>(p);                                                                           \
  }
SPARKRT_TURBO_DECODE(2)
SPARKRT_TURBO_DECODE(3)
SPARKRT_TURBO_DECODE(4)
#undef SPARKRT_TURBO_DECODE
