// turbo_paged_attention: decode attention (one query token per sequence)
// over a paged BF16 K pool and a TurboQuant V pool (2/3/4-bit Lloyd-Max
// values with an FP8 E4M3 scale per 16). Contracts in docs/kernels.md
// ("Module turbo_paged_attention").
//
// Design: the bf16 decode's (paged_attention.cu), with V dequantized on the
// way into the second product. A CTA of 8 warps serves `hpc` (up to 8) query
// heads that share one KV head, so every K and V row is read once for all of
// them. Each warp walks its own tiles of 8 TN tokens with its own online
// softmax (base 2), loading rows straight into registers one tile ahead: the
// next tile's K goes into the registers the current scores have just freed,
// so its loads are in flight during the dequantizing second product (an L2
// prefetch on top measured slower). The warps' results are merged through
// shared memory at the end. Both products run on the tensor cores (f32 accumulate),
// the query heads as 16 rows of which rows past hpc are zero:
//   scores S[head][token] = q[head][:] . K[token][:]   (m16n8k16, bf16)
//   O^T[dim][head] += V^T[dim][token] P^T[token][head] (m16n8k16 or k8, f16)
// Lane (g, c) (g = lane / 4, c = lane % 4) reads row g of each 8-token group
// of K at dims 8 (c + 4 i) .. + 8 (q's fragments use the same dims), so its
// share of S is already P^T's B fragment. For O^T it owns the head_dim / 8
// consecutive V dims from (head_dim / 8) g of tokens 2c, 2c + 1 (+ 8) of each
// 16-token step: one run of packed bits a token (a 16-value group or part of
// one, or two groups at head_dim 256), so its loads are whole words and one
// scale byte per group. Row g of m-tile mt is its dim 2 mt, row g + 8 dim
// 2 mt + 1: the two indices of a dim pair sit next to each other in the
// stream and one table lookup (shared memory, 2^(2 bits) f16 pairs) gives
// both centroids; a byte permute pairs two tokens' values of a dim into an
// A-fragment register, and one f16 multiply applies the two tokens' scales.
// Exact attention over the dequantized V: no row is skipped.
//
// Precision: q and K are exact in bf16; V = centroid x scale and the softmax
// weights P are rounded to f16 (2^-11 relative); scores, softmax and sums
// are f32.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "sparkrt/contract/turbo_paged_attention.h"
#include "sparkrt_kernel_utils.cuh"

namespace {

using namespace sparkrt_kernels;

namespace contract = sparkrt::contract::turbo_paged_attention;
namespace format = sparkrt::contract::turbo_kv_cache;
constexpr int kThreads = int{contract::kThreads};
constexpr int kWarps = int{contract::kWarps};
constexpr int kMaxHpc = int{contract::kMaxHeadsPerCta};
constexpr int kMaxHeadDim = int{contract::kMaxHeadDim};
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

// Two f16 pairs multiplied lane-wise.
__device__ __forceinline__ uint32_t hmul2_bits(uint32_t a, uint32_t b) {
  const __half2 r = __hmul2(*reinterpret_cast<const __half2*>(&a),
                            *reinterpret_cast<const __half2*>(&b));
  return *reinterpret_cast<const uint32_t*>(&r);
}

constexpr int kMaxMt = kMaxHeadDim / 16;  // m-tiles of O^T at head_dim 256
struct Smem {
  union {
    // q's A fragments by k-step and lane (rows 8..15 zero), read in the tile
    // loop only; then the buffer of the warps' tree sum (half the warps'
    // accumulators at once).
    uint4 qa[kMaxHeadDim / 16][32];
    float red[kWarps / 2][4 * kMaxMt * 32];
  };
  uint32_t pairs[256];  // f16 centroid pairs by the 2 x bits of a dim pair
  float ml[kWarps][kMaxHpc][2];
};

// kBits: V bits per value; NKC: 8-dim K pieces per lane (head_dim / 32); TN:
// 8-token groups per tile (1, 2 or 4).
template <uint32_t kBits, int NKC, int TN>
__device__ __forceinline__ void decode(const Params& p, uint32_t hpc, uint32_t kvh, Smem& sm) {
  constexpr int D = 32 * NKC;
  constexpr int MT = D / 16;            // m-tiles of O^T: one per dim pair of a lane
  constexpr int TT = 8 * TN;            // tokens per tile
  constexpr int NV = 2 * TN;            // tokens a lane dequantizes per tile
  constexpr uint32_t kStride = kWarps * TT;
  constexpr uint32_t kLaneDims = D / 8;                 // V dims per lane
  constexpr uint32_t kChunkBits = kLaneDims * kBits;    // their packed bits
  constexpr uint32_t kChunkBytes = kChunkBits / 8;
  constexpr uint32_t kChunkWords = (kChunkBits + 31) / 32;
  // The chunk starts kChunkBytes g into a 4-byte aligned row: its byte
  // offset within a word is 0, 2 (even sizes) or up to 3.
  constexpr uint32_t kMaxLead = kChunkBytes % 4 == 0 ? 0 : kChunkBytes % 2 == 0 ? 2 : 3;
  constexpr uint32_t kLoadWords = (8 * kMaxLead + kChunkBits + 31) / 32;
  constexpr uint32_t kPairBits = 2 * kBits, kPairMask = (1u << kPairBits) - 1u;
  constexpr uint32_t kScales = (kLaneDims + 15) / 16;   // groups a lane's dims touch
  static_assert(4 * MT * 32 <= int(sizeof(Smem::red[0]) / sizeof(float)),
                "a warp's accumulators fit a slot of the tree sum");

  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = lane / 4, c = lane % 4;
  const uint32_t seq = blockIdx.y, head0 = blockIdx.x * hpc;

  const int32_t sl = p.seq_lens[seq];
  const uint64_t cap = uint64_t{p.max_blocks_per_seq} * p.block_size;
  const uint32_t len = sl <= 0 ? 0u : uint32_t(uint64_t(sl) < cap ? uint64_t(sl) : cap);
  const contract::TokenRange range =
      contract::token_range(len, p.sliding_window, p.num_splits, blockIdx.z);
  const uint32_t t0 = range.t0, t1 = range.t1;

  // q's A fragments: k-step 2i + s takes dims 8 (c + 4i) + 4s + {0, 1}
  // (register 0) and + {2, 3} (register 2) of head g; the centroid pairs.
  for (uint32_t i = threadIdx.x; i < uint32_t(2 * NKC * 32); i += kThreads) {
    const uint32_t ks = i / 32, ln = i % 32, hg = ln / 4;
    const uint32_t d0 = 8 * (ln % 4 + 4 * (ks / 2)) + 4 * (ks % 2);
    uint32_t w[2] = {0u, 0u};
    if (hg < hpc) {
      const uint16_t* qh = reinterpret_cast<const uint16_t*>(
          p.q + uint64_t{seq} * p.q_stride + uint64_t{head0 + hg} * D + d0);
      w[0] = uint32_t{qh[0]} | (uint32_t{qh[1]} << 16);
      w[1] = uint32_t{qh[2]} | (uint32_t{qh[3]} << 16);
    }
    sm.qa[ks][ln] = make_uint4(w[0], 0u, w[1], 0u);
  }
  for (uint32_t e = threadIdx.x; e < (1u << kPairBits); e += kThreads) {
    const __half2 h = __floats2half2_rn(format::centroid(kBits, e & ((1u << kBits) - 1u)),
                                        format::centroid(kBits, e >> kBits));
    sm.pairs[e] = *reinterpret_cast<const uint32_t*>(&h);
  }
  __syncthreads();
  const float qsc = p.inv_sqrt_d * kLog2e;
  const uint32_t qa_addr = uint32_t(__cvta_generic_to_shared(&sm.qa[0][lane]));

  // O^T accumulators: m-tile mt, register 2r + q is dim kLaneDims g + 2 mt +
  // r, head 2c + q.
  float o[MT][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int k = 0; k < 4; ++k) o[mt][k] = 0.f;
  // Running max of head g (the same in the 4 lanes of a row) and this lane's
  // part of its sum.
  float m_run = -INFINITY, l_run = 0.f;

  const sparkrt_kernels::BlockDiv bdiv(p.block_size);
  const int32_t* bt = p.block_tables + uint64_t{seq} * p.max_blocks_per_seq;
  const uint64_t k_row = uint64_t{p.num_kv_heads} * D;  // elements per token
  const uint64_t k_block = uint64_t{p.block_size} * k_row;
  const uint64_t v_token_data = uint64_t{p.num_kv_heads} * D * kBits / 8;
  const uint32_t v_token_scales = p.num_kv_heads * (D / 16);
  const uint32_t lead = (kChunkBytes * g) % 4;  // the chunk's byte offset in its first word
  const uint64_t v_lane =
      uint64_t{kvh} * (D * kBits / 8) + kChunkBytes * g - lead;  // in a token's data
  const uint32_t s_lane = kvh * (D / 16) + kLaneDims * g / 16;   // its first group's scale

  auto in_range = [&](uint32_t tok) { return tok >= t0 && tok < t1; };
  // Tiles on multiples of TT from t0 rounded down; tokens outside the range
  // are masked and never read. Lane l holds the block id of token
  // tile + l % TT; the lanes reading a token take it by shuffle.
  uint32_t base = t0 < t1 ? t0 / TT * TT + warp * TT : t1;
  auto block_of = [&](uint32_t tile) {
    const uint32_t tok = tile + lane % TT;
    return in_range(tok) ? bt[bdiv.div(tok)] : 0;
  };
  // K: lane (g, c) reads token tile + 8 nt + g, pieces c + 4i.
  auto load_k = [&](uint32_t tile, int32_t blk, uint4(&kv)[TN][NKC]) {
#pragma unroll
    for (int nt = 0; nt < TN; ++nt) {
      const uint32_t tok = tile + 8 * nt + g;
      const int32_t b = __shfl_sync(kFull, blk, 8 * nt + g);
      const uint4* k = reinterpret_cast<const uint4*>(p.k_cache + uint32_t(b) * k_block +
                                                      bdiv.mod(tok) * k_row + uint64_t{kvh} * D) +
                       c;
#pragma unroll
      for (int i = 0; i < NKC; ++i) {
        if (in_range(tok))
          kv[nt][i] = load_stream(k + 4 * i);
        else
          kv[nt][i] = make_uint4(0u, 0u, 0u, 0u);
      }
    }
  };
  // V: lane (g, c) reads its chunk and scales of tokens tile + 8 nt + 2c + u
  // (index 2 nt + u); zeros outside the range.
  auto load_v = [&](uint32_t tile, int32_t blk, uint32_t(&vw)[NV][kLoadWords],
                    uint32_t(&vs)[NV][kScales]) {
#pragma unroll
    for (int j = 0; j < NV; ++j) {
      const uint32_t r = 8 * (j / 2) + 2 * c + j % 2;
      const uint32_t tok = tile + r;
      const int32_t b = __shfl_sync(kFull, blk, r);
      const uint8_t* vb = p.v_cache + uint32_t(b) * p.v_block_stride_bytes;
      const uint32_t o_tok = bdiv.mod(tok);
      const uint32_t* w = reinterpret_cast<const uint32_t*>(vb + o_tok * v_token_data + v_lane);
      const uint8_t* sc = vb + p.v_data_section_bytes + o_tok * v_token_scales + s_lane;
#pragma unroll
      for (uint32_t k = 0; k < kLoadWords; ++k) vw[j][k] = in_range(tok) ? __ldg(w + k) : 0u;
#pragma unroll
      for (uint32_t k = 0; k < kScales; ++k) vs[j][k] = in_range(tok) ? __ldg(sc + k) : 0u;
    }
  };

  uint4 kv[TN][NKC];
  uint32_t vw[NV][kLoadWords], vs[NV][kScales];
  int32_t blk = block_of(base);
  load_k(base, blk, kv);
  load_v(base, blk, vw, vs);
  blk = block_of(base + kStride);  // the next tile's
  for (; base < t1; base += kStride) {
    const uint32_t next = base + kStride;
    // Scores of head g for tokens base + 8 nt + 2c + {0, 1}.
    float s[TN][2];
#pragma unroll
    for (int nt = 0; nt < TN; ++nt) {
      // Even and odd k-steps into separate accumulators: two chains of
      // dependent mma instead of one twice as long.
      float acc_e[4] = {0.f, 0.f, 0.f, 0.f}, acc_o[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
      for (int i = 0; i < NKC; ++i) {
        const uint4 qe = lds_u4(qa_addr + (2 * i) * 32 * sizeof(uint4));
        const uint4 qo = lds_u4(qa_addr + (2 * i + 1) * 32 * sizeof(uint4));
        mma_k16<false>(acc_e, qe.x, qe.y, qe.z, qe.w, kv[nt][i].x, kv[nt][i].y);
        mma_k16<false>(acc_o, qo.x, qo.y, qo.z, qo.w, kv[nt][i].z, kv[nt][i].w);
      }
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        const uint32_t tok = base + 8 * nt + 2 * c + u;
        s[nt][u] = in_range(tok) ? (acc_e[u] + acc_o[u]) * qsc : -INFINITY;
      }
    }

    // The next tile's rows, K into the registers the scores just freed: in
    // flight during this tile's softmax and second product.
    uint32_t next_vw[NV][kLoadWords], next_vs[NV][kScales];
    load_k(next, blk, kv);
    load_v(next, blk, next_vw, next_vs);
    const int32_t blk_after = block_of(next + kStride);

    // Online softmax of head g over the tile's tokens.
    float mx = s[0][0];
#pragma unroll
    for (int nt = 0; nt < TN; ++nt) mx = fmaxf(mx, fmaxf(s[nt][0], s[nt][1]));
    mx = fmaxf(mx, __shfl_xor_sync(kFull, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(kFull, mx, 2));
    const float m_new = fmaxf(m_run, mx);  // finite: every tile holds a token in range
    const float alpha = ex2_ftz(m_run - m_new);
    m_run = m_new;
    float sum = 0.f;
#pragma unroll
    for (int nt = 0; nt < TN; ++nt)
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        s[nt][u] = ex2_ftz(s[nt][u] - m_new);  // 0 past the range
        sum += s[nt][u];
      }
    l_run = l_run * alpha + sum;
    // Rescale the outputs when some head's max moved: my columns are heads
    // 2c and 2c + 1, whose alpha lanes 8c and 8c + 4 hold.
    if (!__all_sync(kFull, alpha == 1.f)) {
      const float a_lo = __shfl_sync(kFull, alpha, 8 * c);
      const float a_hi = __shfl_sync(kFull, alpha, 8 * c + 4);
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        o[mt][0] *= a_lo;
        o[mt][1] *= a_hi;
        o[mt][2] *= a_lo;
        o[mt][3] *= a_hi;
      }
    }

    // P^T as the B operand (k = token 8 nt + 2c + u, n = head g).
    uint32_t ph[TN];
#pragma unroll
    for (int nt = 0; nt < TN; ++nt) ph[nt] = pack_f16(s[nt][0], s[nt][1]);

    // Each token's chunk from its words, and the tokens' scales as f16
    // pairs: tokens 2k and 2k + 1 (the two columns of a register) per group.
    uint32_t cw[NV][kChunkWords];
#pragma unroll
    for (int j = 0; j < NV; ++j)
#pragma unroll
      for (uint32_t k = 0; k < kChunkWords; ++k) {
        if constexpr (kMaxLead == 0)
          cw[j][k] = vw[j][k];
        else
          cw[j][k] = k + 1 < kLoadWords ? __funnelshift_r(vw[j][k], vw[j][k + 1], 8 * lead)
                                        : vw[j][k] >> (8 * lead);
      }
    uint32_t sp[TN][kScales];
#pragma unroll
    for (int k = 0; k < TN; ++k)
#pragma unroll
      for (uint32_t e = 0; e < kScales; ++e)
        sp[k][e] = fp8x2_to_half2_bits(vs[2 * k][e] | (vs[2 * k + 1][e] << 8));

    // O^T += V^T P^T: m-tile mt is the lanes' dim pair mt. Each token's two
    // centroids of the pair come from one table lookup; a permute pairs two
    // tokens' values of a dim, scaled by their scales.
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      const uint32_t e = 2 * mt / format::kGroup;  // the group of the pair among the lane's
      const uint32_t bit = kPairBits * mt, wd = bit / 32, sh = bit % 32;
      uint32_t cv[NV];
#pragma unroll
      for (int j = 0; j < NV; ++j) {
        const uint32_t idx = sh + kPairBits <= 32 || wd + 1 >= kChunkWords
                                 ? (cw[j][wd] >> sh) & kPairMask
                                 : __funnelshift_r(cw[j][wd], cw[j][wd + 1], sh) & kPairMask;
        cv[j] = sm.pairs[idx];
      }
      // Rows g / g + 8 (dims 2 mt, 2 mt + 1) of tokens 2 nt + {0, 1}.
      auto rows = [&](int nt, uint32_t& lo, uint32_t& hi) {
        lo = hmul2_bits(prmt(cv[2 * nt], cv[2 * nt + 1], 0x5410), sp[nt][e]);
        hi = hmul2_bits(prmt(cv[2 * nt], cv[2 * nt + 1], 0x7632), sp[nt][e]);
      };
      if constexpr (TN == 1) {
        uint32_t a0, a1;
        rows(0, a0, a1);
        mma_k8<true>(o[mt], a0, a1, ph[0]);
      } else {
#pragma unroll
        for (int nt = 0; nt < TN; nt += 2) {
          uint32_t a0, a1, a2, a3;
          rows(nt, a0, a1);
          rows(nt + 1, a2, a3);
          mma_k16<true>(o[mt], a0, a1, a2, a3, ph[nt], ph[nt + 1]);
        }
      }
    }
#pragma unroll
    for (int j = 0; j < NV; ++j) {
#pragma unroll
      for (uint32_t k = 0; k < kLoadWords; ++k) vw[j][k] = next_vw[j][k];
#pragma unroll
      for (uint32_t k = 0; k < kScales; ++k) vs[j][k] = next_vs[j][k];
    }
    blk = blk_after;
  }

  // Merge the warps: a common max per head, then a tree sum of the
  // accumulators through shared memory.
  l_run += __shfl_xor_sync(kFull, l_run, 1);
  l_run += __shfl_xor_sync(kFull, l_run, 2);
  if (c == 0) {
    sm.ml[warp][g][0] = m_run;
    sm.ml[warp][g][1] = l_run;
  }
  __syncthreads();  // also: every warp is past its last read of sm.qa
  float mh[2], lh[2];  // the CTA's max and sum of heads 2c, 2c + 1
#pragma unroll
  for (int q = 0; q < 2; ++q) {
    const int h = 2 * c + q;
    float m = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) m = fmaxf(m, sm.ml[w][h][0]);
    float l = 0.f, f = 0.f;
    if (m != -INFINITY) {
#pragma unroll
      for (int w = 0; w < kWarps; ++w) l += ex2_ftz(sm.ml[w][h][0] - m) * sm.ml[w][h][1];
      f = ex2_ftz(sm.ml[warp][h][0] - m);  // 0 for a warp without tokens
    }
    mh[q] = m;
    lh[q] = l;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      o[mt][q] *= f;
      o[mt][q + 2] *= f;
    }
  }
  for (int half = kWarps / 2; half >= 1; half /= 2) {
    if (warp >= half && warp < 2 * half) {
      float* slot = sm.red[warp - half];
#pragma unroll
      for (int k = 0; k < 4 * MT; ++k) slot[k * 32 + lane] = o[k / 4][k % 4];
    }
    __syncthreads();
    if (warp < half) {
      const float* slot = sm.red[warp];
#pragma unroll
      for (int k = 0; k < 4 * MT; ++k) o[k / 4][k % 4] += slot[k * 32 + lane];
    }
    __syncthreads();
  }
  if (warp != 0) return;
  // Warp 0 writes: out for the one-pass entries, else the unnormalised
  // partials and the (max, sum) pairs.
#pragma unroll
  for (int k = 0; k < 4 * MT; ++k) {
    const uint32_t mt = k / 4, r = (k % 4) / 2, q = k % 2;
    const uint32_t h = 2 * c + q, d = kLaneDims * g + 2 * mt + r;
    if (h >= hpc) continue;
    const uint64_t qrow = uint64_t{seq} * p.num_q_heads + head0 + h;
    const float v = o[mt][k % 4];
    if (p.num_splits == 0) {
      const float l = q == 0 ? lh[0] : lh[1];
      p.out[qrow * D + d] = __float2bfloat16_rn(l > 0.f ? v / l : 0.f);
    } else {
      p.part_acc[(qrow * p.num_splits + blockIdx.z) * D + d] = v;
    }
  }
  if (p.num_splits != 0 && g == 0) {
#pragma unroll
    for (int q = 0; q < 2; ++q) {
      const uint32_t h = 2 * c + q;
      if (h >= hpc) continue;
      const uint64_t prow = (uint64_t{seq} * p.num_q_heads + head0 + h) * p.num_splits + blockIdx.z;
      p.part_ml[2 * prow] = mh[q];
      p.part_ml[2 * prow + 1] = lh[q];
    }
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
      ((reinterpret_cast<uintptr_t>(p.v_cache) | p.v_block_stride_bytes) % 4) != 0 ||
      (reinterpret_cast<uintptr_t>(p.k_cache) % 16) != 0)
    return;
  const uint32_t kvh = blockIdx.x * hpc / (p.num_q_heads / p.num_kv_heads);
  if (p.head_dim == 64) return decode<kBits, 2, 4>(p, hpc, kvh, sm);
  if (p.head_dim == 128) return decode<kBits, 4, 2>(p, hpc, kvh, sm);
  return decode<kBits, 8, 1>(p, hpc, kvh, sm);
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

#define SPARKRT_TURBO_BOUNDS __launch_bounds__(kThreads, 2)

// One pass: out[seq][head] = softmax(q K^T * inv_sqrt_d) V over the
// sequence's tokens (its window's, with sliding_window > 0). Grid
// (num_q_heads / hpc, num_seqs), block 256.
#define SPARKRT_TURBO_DECODE(bits)                                                               \
  extern "C" __global__ void SPARKRT_TURBO_BOUNDS paged_decode_attn_bf16k_turbo##bits##v(        \
      const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ k_cache,            \
      const uint8_t* __restrict__ v_cache, __nv_bfloat16* __restrict__ out,                      \
      const int32_t* __restrict__ block_tables, const int32_t* __restrict__ seq_lens,            \
      uint32_t max_blocks_per_seq, uint32_t num_q_heads, uint32_t num_kv_heads,                  \
      uint32_t head_dim, uint32_t block_size, float inv_sqrt_d, uint32_t q_stride,               \
      uint64_t v_block_stride_bytes, uint64_t v_data_section_bytes, uint32_t sliding_window) {   \
    sparkrt_kernels::dependent_launch_sync();                                                    \
    Params p = make_params(q, k_cache, v_cache, block_tables, seq_lens, max_blocks_per_seq,      \
                           num_q_heads, num_kv_heads, head_dim, block_size, inv_sqrt_d,          \
                           q_stride, v_block_stride_bytes, v_data_section_bytes, sliding_window); \
    p.out = out;                                                                                 \
    dispatch<bits>(p);                                                                           \
  }                                                                                              \
  /* Split z = blockIdx.z of num_splits: the unnormalised partials, merged by */                 \
  /* paged_attention.paged_decode_attn_combine. Grid (num_q_heads / hpc, num_seqs, */            \
  /* num_splits), block 256. */                                                                  \
  extern "C" __global__ void SPARKRT_TURBO_BOUNDS paged_decode_attn_bf16k_turbo##bits##v_split(  \
      const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ k_cache,            \
      const uint8_t* __restrict__ v_cache, float* __restrict__ part_acc,                         \
      float* __restrict__ part_ml, const int32_t* __restrict__ block_tables,                     \
      const int32_t* __restrict__ seq_lens, uint32_t max_blocks_per_seq, uint32_t num_q_heads,   \
      uint32_t num_kv_heads, uint32_t head_dim, uint32_t block_size, float inv_sqrt_d,           \
      uint32_t q_stride, uint64_t v_block_stride_bytes, uint64_t v_data_section_bytes,           \
      uint32_t sliding_window, uint32_t num_splits) {                                            \
    sparkrt_kernels::dependent_launch_sync();                                                    \
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
#undef SPARKRT_TURBO_BOUNDS
