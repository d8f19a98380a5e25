// paged_attention: decode attention (one query token per sequence) over a
// paged KV cache in bf16 or fp8 E4M3. Contracts and geometry in
// docs/kernels.md ("Module paged_attention").
//
// Design. Decode attention reads each K and V row once and does a few flops
// per byte, so it is bound by memory if enough loads are in flight and the
// arithmetic stays off the issue path. A CTA of 8 warps serves `hpc` (up to
// 8) query heads that share one KV head, so K/V are read once for all of
// them. Each warp walks its own tiles of 8 tokens (16 for head_dim <= 64)
// with its own online softmax (base 2) and no barrier. When the launch gives
// dynamic shared memory, a warp copies its next tile's rows into its own
// stage with cp.async (L2 evict-first: rows are read once) while it computes
// the current one; without it, the lanes load a tile's K and V rows straight
// into registers and ask L2 for the next tile's rows. The warps' results are
// merged through shared memory at the end.
//
// The products run on the tensor cores (mma.sync, f32 accumulate), with the
// query heads as the 16 rows of the matrix (rows past hpc are zero):
//   scores S[head][token] = q[head][:] . K[token][:]   (m16n8k16, A = q, B = K^T)
//   O^T[dim][head] += V^T[dim][token] P^T[token][head] (m16n8k8 for 8-token
//                                                        tiles, else k16; A = V^T)
// so each lane's share of S is already the B operand of the second product
// (no shuffles). Both reductions may run over any order of their index, which
// lets every lane load whole 16-byte pieces of cache rows straight into
// registers: for S, lane (g, c) (g = lane / 4, c = lane % 4) reads row g of
// the tile's 8-token group at dims 8 (c + 4 i) .. + 8, which become its B
// fragments for k-steps 2i and 2i + 1 (q's A fragments use the same dims);
// for O^T, it reads tokens 2c, 2c + 1 (and + 8) at dims 8 (g + 8 j) .. + 8,
// and one byte permute pairs the two tokens' values of a dim into a V^T
// fragment register.
//
// Precision. bf16 caches use bf16 products: q, K and V are exact, and the
// softmax weights P go in as a bf16 pair hi + lo (two products), so they keep
// about 16 bits. fp8 caches use f16 products: K and V are exact in f16, q is
// scaled per head by a power of two into f16's range (exact), P is f16.
// Scores, softmax and sums are f32.
//
// The split entries run the same loop on a slice of the tokens (blockIdx.z
// of num_splits) and write unnormalised partials that
// paged_decode_attn_combine merges; the split-merge entries do the same and
// the last CTA of each (sequence, head group) to finish merges the partials
// itself (an arrival counter per group in the workspace), so split-KV is one
// launch.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "sparkrt/contract/paged_attention.h"
#include "sparkrt_kernel_utils.cuh"

// Build-time tuning switches (the tile switches are in the contract header);
// the defaults are the versions measured best on the H200
// (docs/benchmark-notes.md, "Paged decode attention").
//
// P > 0: each warp iteration asks L2 for the K and V rows of the iteration P
// ahead (no registers held), so more bytes are in flight than the registers
// allow.
#ifndef SPARKRT_PA_PREFETCH
#define SPARKRT_PA_PREFETCH 1
#endif
// Resident CTAs per multiprocessor the compiler budgets registers for, per
// entry dtype.
#ifndef SPARKRT_PA_MIN_CTAS
#define SPARKRT_PA_MIN_CTAS 2
#endif
#ifndef SPARKRT_PA_MIN_CTAS_FP8
#define SPARKRT_PA_MIN_CTAS_FP8 2
#endif

namespace {

using namespace sparkrt_kernels;

namespace contract = sparkrt::contract::paged_attention;
// The contract's constants, typed as this file's arithmetic uses them.
constexpr int kThreads = int{contract::kThreads};
constexpr int kWarps = int{contract::kWarps};
constexpr int kMaxHpc = int{contract::kMaxHeadsPerCta};
constexpr int kMaxHeadDim = int{contract::kMaxHeadDim};
constexpr uint32_t kStages = contract::kStages;
constexpr float kLog2e = 1.4426950408889634f;
constexpr uint32_t kFull = 0xffffffffu;

// Per cache dtype: a lane's 16-byte (bf16) or 8-byte (fp8) piece of a row,
// 8 elements, and how it becomes mma operand registers.
template <typename T>
struct Cache;
template <>
struct Cache<__nv_bfloat16> {
  using Vec = uint4;
  static constexpr bool kF16 = false;
  static constexpr int kGroupsD128 = int{contract::kTileGroupsD128Bf16};
  // Register r of the piece as a B fragment: elements 2r, 2r + 1.
  static __device__ __forceinline__ void k_regs(const Vec& v, uint32_t (&r)[4]) {
    r[0] = v.x;
    r[1] = v.y;
    r[2] = v.z;
    r[3] = v.w;
  }
  // Element 2r of tokens a and b (lo) and element 2r + 1 of both (hi), each
  // pair as one register, token a in the low half.
  template <int R>
  static __device__ __forceinline__ void v_pair(const Vec& a, const Vec& b, uint32_t& lo,
                                                uint32_t& hi) {
    const uint32_t wa = R == 0 ? a.x : R == 1 ? a.y : R == 2 ? a.z : a.w;
    const uint32_t wb = R == 0 ? b.x : R == 1 ? b.y : R == 2 ? b.z : b.w;
    lo = prmt(wa, wb, 0x5410);
    hi = prmt(wa, wb, 0x7632);
  }
};
template <>
struct Cache<__nv_fp8_storage_t> {
  using Vec = uint2;
  static constexpr bool kF16 = true;
  static constexpr int kGroupsD128 = int{contract::kTileGroupsD128Fp8};
  static __device__ __forceinline__ void k_regs(const Vec& v, uint32_t (&r)[4]) {
    r[0] = fp8x2_to_half2_bits(v.x);
    r[1] = fp8x2_to_half2_bits(v.x >> 16);
    r[2] = fp8x2_to_half2_bits(v.y);
    r[3] = fp8x2_to_half2_bits(v.y >> 16);
  }
  template <int R>
  static __device__ __forceinline__ void v_pair(const Vec& a, const Vec& b, uint32_t& lo,
                                                uint32_t& hi) {
    const uint32_t wa = R < 2 ? a.x : a.y;
    const uint32_t wb = R < 2 ? b.x : b.y;
    // Bytes (a[2r], b[2r], a[2r + 1], b[2r + 1]) of the word, then to f16.
    const uint32_t w = prmt(wa, wb, R % 2 == 0 ? 0x5140 : 0x7362);
    lo = fp8x2_to_half2_bits(w);
    hi = fp8x2_to_half2_bits(w >> 16);
  }
};

struct Params {
  const __nv_bfloat16* q;
  const void* k_cache;
  const void* v_cache;
  __nv_bfloat16* out;       // one pass, split-merge: [num_seqs][num_q_heads][head_dim]
  float* part_acc;          // split: [num_seqs][num_q_heads][num_splits][head_dim]
  float* part_ml;           // split: [num_seqs][num_q_heads][num_splits][2]
  const int32_t* block_tables;
  const int32_t* seq_lens;
  uint32_t max_blocks_per_seq, num_q_heads, num_kv_heads, head_dim, block_size;
  float q_scale;            // inv_sqrt_d * log2(e) (* k_scale for fp8)
  float v_scale;            // 1 for bf16
  uint32_t q_stride;
  uint64_t block_stride;    // elements per cache block
  uint32_t sliding_window;
  uint32_t num_splits;      // 0: non-split entry
  uint32_t* counters;       // split-merge: [num_seqs][grid.x] arrival counters
};

// Static shared memory of one CTA: q's fragments, the warps' (max, sum) per
// head, and a small buffer for the warps' tree reduction (as many warps'
// accumulators at once as fit). Dynamic shared memory, when the launch gives
// kWarps * kStages stages of 2 * TT * pitch bytes, holds each warp's staging
// while the tiles run (else the lanes load rows into registers), then the
// reduction if it holds half the warps' accumulators (all of them: one step).
constexpr int kMaxAccRegs = 4 * 4 * (kMaxHeadDim / 64);  // m-tiles x 4 at head_dim 256
struct Smem {
  union {
    // q's A fragments by k-step and lane, whole: the four registers of the
    // mma (rows 8..15 zero) in one load. Read in the tile loop only, so the
    // tree reduction's buffer (one warp's accumulators at head_dim 256) may
    // take their place after it.
    uint4 qa[2 * (kMaxHeadDim / 32)][32];
    float red[kMaxAccRegs * 32];
  };
  float ml[kWarps][kMaxHpc][2];
  float q_scale[kMaxHpc];  // f16 products: each head's score scale
};
// The host sizes the staging against the contract's budget for it.
static_assert(sizeof(Smem) + 256 <= contract::kStaticSmemBudget,
              "static shared memory within the contract's budget");

// Split-merge: after every CTA of a (sequence, head group) has written its
// partials, the last to arrive merges them into `out` (the combine's
// arithmetic) and returns the group's counter to zero for the next launch.
// The barrier orders every warp's partial stores before thread 0's arrival,
// which releases them and, in the last CTA, acquires the others' (the
// barrier after it passes that on), so the partials are read from L2 with no
// further fence.
__device__ __noinline__ void merge_splits(const Params& p, uint32_t hpc) {
  __shared__ uint32_t last;
  __syncthreads();
  if (threadIdx.x == 0) {
    uint32_t* ctr = p.counters + uint64_t{blockIdx.y} * gridDim.x + blockIdx.x;
    uint32_t ticket;
    asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;"
                 : "=r"(ticket)
                 : "l"(ctr)
                 : "memory");
    const uint32_t is_last = ticket == p.num_splits - 1 ? 1u : 0u;
    if (is_last) atomicExch(ctr, 0u);
    last = is_last;
  }
  __syncthreads();
  if (!last) return;
  // Column i (4 dims of one head) is merged by T consecutive lanes, each over
  // every T-th split: the common max and the sums go through shuffles, not
  // shared memory. A lane loads its first kChunk splits' (max, sum) pairs
  // and partials at once, so up to kChunk splits a lane (16 splits at 4
  // query heads per CTA and head_dim 128, the op's batch-1 choice there) the
  // merge costs one round trip to L2; each further chunk costs two, kept
  // short because this code runs once a launch (16 pairs up front measured
  // slower at batch 1).
  const uint32_t S = p.num_splits, D = p.head_dim, D4 = D / 4;
  const uint64_t row0 = uint64_t{blockIdx.y} * p.num_q_heads + uint64_t{blockIdx.x} * hpc;
  const uint32_t cols = hpc * D4;
  uint32_t T = 1;
  while (T < 32 && 2 * T * cols <= uint32_t(kThreads)) T *= 2;
  const uint32_t sub = threadIdx.x % T, per_pass = kThreads / T;
  constexpr int kChunk = 8;
  for (uint32_t i = threadIdx.x / T; i < (cols + per_pass - 1) / per_pass * per_pass;
       i += per_pass) {
    const bool on = i < cols;
    const uint32_t h = on ? i / D4 : 0, d4 = on ? i % D4 : 0;
    const float2* ml = reinterpret_cast<const float2*>(p.part_ml) + (row0 + h) * S;
    const float4* acc = reinterpret_cast<const float4*>(p.part_acc + (row0 + h) * S * D) + d4;
    // The pairs and partials of splits sub + (u0 + u) T, u < kChunk.
    float2 v[kChunk];
    float4 a[kChunk];
    auto load = [&](uint32_t u0, bool parts) {
#pragma unroll
      for (int u = 0; u < kChunk; ++u) {
        const uint32_t z = sub + (u0 + u) * T;
        const bool in = on && z < S;
        v[u] = in ? __ldcg(ml + z) : make_float2(-INFINITY, 0.f);
        if (parts) a[u] = in ? __ldcg(acc + uint64_t{z} * D4) : make_float4(0.f, 0.f, 0.f, 0.f);
      }
    };
    float m = -INFINITY;  // over the splits with tokens: an empty one takes no part
    auto take_max = [&] {
#pragma unroll
      for (int u = 0; u < kChunk; ++u)
        if (v[u].y > 0.f) m = fmaxf(m, v[u].x);
    };
    load(0, true);
    take_max();
    float2 v0[kChunk];  // the first chunk's pairs, kept while later ones load
#pragma unroll
    for (int u = 0; u < kChunk; ++u) v0[u] = v[u];
    for (uint32_t u0 = kChunk; sub + u0 * T < S; u0 += kChunk) {
      load(u0, false);
      take_max();
    }
    for (uint32_t k = 1; k < T; k *= 2) m = fmaxf(m, __shfl_xor_sync(kFull, m, k));
    float l = 0.f;
    float4 o = make_float4(0.f, 0.f, 0.f, 0.f);
    auto add = [&](const float2(&w)[kChunk]) {
#pragma unroll
      for (int u = 0; u < kChunk; ++u) {
        if (!(w[u].y > 0.f)) continue;
        const float f = ex2_ftz(w[u].x - m);
        l += f * w[u].y;
        o.x += f * a[u].x;
        o.y += f * a[u].y;
        o.z += f * a[u].z;
        o.w += f * a[u].w;
      }
    };
    add(v0);
    for (uint32_t u0 = kChunk; sub + u0 * T < S; u0 += kChunk) {
      load(u0, true);
      add(v);
    }
    for (uint32_t k = 1; k < T; k *= 2) {
      l += __shfl_xor_sync(kFull, l, k);
      o.x += __shfl_xor_sync(kFull, o.x, k);
      o.y += __shfl_xor_sync(kFull, o.y, k);
      o.z += __shfl_xor_sync(kFull, o.z, k);
      o.w += __shfl_xor_sync(kFull, o.w, k);
    }
    if (on && sub == 0) {
      const float inv = l > 0.f ? 1.f / l : 0.f;
      __nv_bfloat162* dst =
          reinterpret_cast<__nv_bfloat162*>(p.out + (row0 + h) * D + 4 * uint64_t{d4});
      dst[0] = __floats2bfloat162_rn(o.x * inv, o.y * inv);
      dst[1] = __floats2bfloat162_rn(o.z * inv, o.w * inv);
    }
  }
}

// The tokens [t0, t1) a CTA attends to: the window, clamped to the block
// table, then the split (blockIdx.z of num_splits). Token indices fit 32
// bits: seq_lens are i32.
// The sequence's window, clamped to its block table's capacity; split
// blockIdx.z's part of it when split (sparkrt/contract/split_kv.h).
__device__ __forceinline__ contract::TokenRange token_range(const Params& p, uint32_t seq) {
  const int32_t sl = p.seq_lens[seq];
  const uint64_t cap = uint64_t{p.max_blocks_per_seq} * p.block_size;
  const uint32_t len = sl <= 0 ? 0u : uint32_t(uint64_t(sl) < cap ? uint64_t(sl) : cap);
  return contract::token_range(len, p.sliding_window, p.num_splits, blockIdx.z);
}

// q as the A operand: row g is head head0 + g (zero past hpc), k-step
// 2i + s takes dims 8 (c + 4i) + 4s + {0, 1} (register 0) and + {2, 3}
// (register 1); rows 8..15 are zero. Scores are acc * qsc. Warp 0 builds
// the fragments from whole 16-byte pieces of q (bf16 pieces are already
// the registers) and leaves them in shared memory, where every warp reads
// them per k-step (registers are kept for loads in flight), so this
// short-lived code runs once per CTA.
template <bool F16, int NKC>
__device__ __forceinline__ void stage_q_fragments(const Params& p, uint32_t seq, uint32_t head0,
                                                  uint32_t hpc, Smem& sm) {
  const int lane = threadIdx.x % 32;
  const int g = lane / 4, c = lane % 4;
  const uint32_t D = p.head_dim;
  const __nv_bfloat16* qh = p.q + uint64_t{seq} * p.q_stride + uint64_t{head0 + g} * D;
  const bool whole =
      ((reinterpret_cast<uintptr_t>(p.q) | (uintptr_t{p.q_stride} * 2) | (D * 2)) % 16) == 0;
  uint4 qw[NKC];  // lane's pieces, 8 bf16 each
#pragma unroll
  for (int i = 0; i < NKC; ++i) {
    const uint32_t d0 = 8 * (c + 4 * i);
    qw[i] = make_uint4(0u, 0u, 0u, 0u);
    if (uint32_t(g) >= hpc || d0 >= D) continue;
    if (whole) {
      qw[i] = *reinterpret_cast<const uint4*>(qh + d0);
    } else {
      const uint16_t* h16 = reinterpret_cast<const uint16_t*>(qh + d0);
      uint32_t w[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) w[e] = uint32_t{h16[2 * e]} | (uint32_t{h16[2 * e + 1]} << 16);
      qw[i] = make_uint4(w[0], w[1], w[2], w[3]);
    }
  }
  if constexpr (F16) {
    // A power of two that brings the head's largest |q| to [2^14, 2^15):
    // every bf16 value of the head is then exact in f16 or negligible.
    float f[NKC][8];
    float mx = 0.f;
#pragma unroll
    for (int i = 0; i < NKC; ++i) {
      bf16x8_to_float(qw[i], f[i]);
#pragma unroll
      for (int e = 0; e < 8; ++e) mx = fmaxf(mx, fabsf(f[i][e]));
    }
    mx = fmaxf(mx, __shfl_xor_sync(kFull, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(kFull, mx, 2));
    int e = 0;
    if (mx > 0.f && mx < INFINITY) frexpf(mx, &e);  // mx in [2^(e-1), 2^e)
    const int k = min(max(15 - e, -100), 100);
    const float mul = ldexpf(1.f, k);
    if (c == 0) sm.q_scale[g] = ldexpf(p.q_scale, -k);
#pragma unroll
    for (int i = 0; i < NKC; ++i) {
      sm.qa[2 * i][lane] = make_uint4(pack_f16(f[i][0] * mul, f[i][1] * mul), 0u,
                                      pack_f16(f[i][2] * mul, f[i][3] * mul), 0u);
      sm.qa[2 * i + 1][lane] = make_uint4(pack_f16(f[i][4] * mul, f[i][5] * mul), 0u,
                                          pack_f16(f[i][6] * mul, f[i][7] * mul), 0u);
    }
  } else {
#pragma unroll
    for (int i = 0; i < NKC; ++i) {
      sm.qa[2 * i][lane] = make_uint4(qw[i].x, 0u, qw[i].y, 0u);
      sm.qa[2 * i + 1][lane] = make_uint4(qw[i].z, 0u, qw[i].w, 0u);
    }
  }
}

// NKC: 8-dim K pieces per lane (head_dim <= 32 NKC); NVC: V pieces per lane
// (head_dim <= 64 NVC); TN: 8-token groups per warp iteration.
template <typename T, int NKC, int NVC, int TN, bool MERGE>
__device__ __forceinline__ void decode(const Params& p, uint32_t hpc, uint32_t kvh, Smem& sm,
                                       unsigned char* dyn) {
  using C = Cache<T>;
  using Vec = typename C::Vec;
  constexpr bool F16 = C::kF16;
  constexpr int MT = 4 * NVC;    // 16-dim m-tiles of O^T
  constexpr int TT = 8 * TN;     // tokens per warp iteration
  constexpr uint32_t kStride = kWarps * TT;

  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = lane / 4, c = lane % 4;
  const uint32_t D = p.head_dim;
  const uint32_t seq = blockIdx.y;
  const uint32_t head0 = blockIdx.x * hpc;

  const contract::TokenRange range = token_range(p, seq);
  const uint32_t t0 = range.t0, t1 = range.t1;
  const sparkrt_kernels::BlockDiv bdiv(p.block_size);

  // Warp 0 builds q's fragments; the other warps go straight to the barrier.
  if (warp == 0) stage_q_fragments<F16, NKC>(p, seq, head0, hpc, sm);
  __syncthreads();
  float qsc = p.q_scale;
  if constexpr (F16) qsc = sm.q_scale[g];
  const uint32_t qa_addr = uint32_t(__cvta_generic_to_shared(&sm.qa[0][lane]));

  // O^T accumulators: m-tile mt, register 2r + q is dim 8 (g + 8 (mt / 4)) +
  // 2 (mt % 4) + r, head 2c + q.
  float o[MT][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int k = 0; k < 4; ++k) o[mt][k] = 0.f;
  // Running max of head g (the same in the 4 lanes of a row) and this lane's
  // part of its sum.
  float m_run = -INFINITY, l_run = 0.f;

  const T* kc = static_cast<const T*>(p.k_cache);
  const T* vc = static_cast<const T*>(p.v_cache);
  const int32_t* bt = p.block_tables + uint64_t{seq} * p.max_blocks_per_seq;
  const uint64_t row = uint64_t{p.num_kv_heads} * D;
  const uint64_t head_off = uint64_t{kvh} * D;

  // This warp's tiles start at base, base + kStride, ... on multiples of TT
  // from t0 rounded down, so that a window starting mid-tile still gets whole
  // tiles (the fast copies); tokens before t0 are masked and never read. The
  // lanes hold the tokens' block ids (lane l: token tile + l % TT in the
  // register loop) and the lanes that read or copy a token take its id by
  // shuffle.
  auto in_range = [&](uint32_t tok) { return tok >= t0 && tok < t1; };
  uint32_t base = t0 < t1 ? t0 / TT * TT + warp * TT : t1;
  auto block_of = [&](uint32_t tile) {
    const uint32_t tok = tile + lane % TT;
    return in_range(tok) ? bt[bdiv.div(tok)] : 0;
  };
  // The cache offset (elements) of token tok's row, in block b.
  auto row_off = [&](int32_t b, uint32_t tok) {
    return uint64_t(uint32_t(b)) * p.block_stride + uint64_t{bdiv.mod(tok)} * row + head_off;
  };
  // Asks L2 for the K and V rows of the tile at `tile` (block id of token
  // tile + lane % TT in `b`): 128-byte line x / 2 of the K row (x even) or
  // the V row of that token.
  auto prefetch_tile = [&](uint32_t tile, int32_t b) {
    const uint32_t tok = tile + lane % TT;
    if (!in_range(tok)) return;
    const uint32_t lines = (D * uint32_t(sizeof(T)) + 127) / 128;
    const uint64_t off = row_off(b, tok);
    for (uint32_t x = lane / TT; x < 2 * lines; x += 32 / TT)
      prefetch_l2(reinterpret_cast<const char*>((x % 2 == 0 ? kc : vc) + off) + 128 * (x / 2));
  };
  // One tile at `base`: the scores, the online softmax of each head and
  // O^T += V^T P^T, from the K pieces `kv` and V pieces `vv` the lanes hold
  // (the layouts the loops below load); `mid` runs between the softmax and
  // the second product.
  auto consume = [&](uint32_t base, const Vec(&kv)[TN][NKC], const Vec(&vv)[2 * TN][NVC],
                     auto&& mid) {
    // Scores of head g for tokens base + 8 nt + 2c + {0, 1}.
    float s[TN][2];
#pragma unroll
    for (int nt = 0; nt < TN; ++nt) {
      // Even and odd k-steps into separate accumulators: two chains of
      // dependent mma instead of one twice as long.
      float acc_e[4] = {0.f, 0.f, 0.f, 0.f}, acc_o[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
      for (int i = 0; i < NKC; ++i) {
        uint32_t kr[4];
        C::k_regs(kv[nt][i], kr);
        const uint4 qe = lds_u4(qa_addr + (2 * i) * 32 * sizeof(uint4));
        const uint4 qo = lds_u4(qa_addr + (2 * i + 1) * 32 * sizeof(uint4));
        mma_k16<F16>(acc_e, qe.x, qe.y, qe.z, qe.w, kr[0], kr[1]);
        mma_k16<F16>(acc_o, qo.x, qo.y, qo.z, qo.w, kr[2], kr[3]);
      }
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        const uint32_t tok = base + 8 * nt + 2 * c + u;
        s[nt][u] = in_range(tok) ? (acc_e[u] + acc_o[u]) * qsc : -INFINITY;
      }
    }

    // Online softmax of head g over the iteration's tokens.
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

    mid();

    // P^T as the B operand (k = token 8 nt + 2c + u, n = head g): bf16 as
    // hi + lo, f16 as is.
    uint32_t ph[TN], pl[TN];
#pragma unroll
    for (int nt = 0; nt < TN; ++nt) {
      if constexpr (F16) {
        ph[nt] = pack_f16(s[nt][0], s[nt][1]);
        pl[nt] = 0u;
      } else {
        ph[nt] = pack_bf16(s[nt][0], s[nt][1]);
        const float h0 = __uint_as_float(ph[nt] << 16), h1 = __uint_as_float(ph[nt] & 0xffff0000u);
        pl[nt] = pack_bf16(s[nt][0] - h0, s[nt][1] - h1);
      }
    }

    // O^T += V^T P^T. A fragment rows g / g + 8 are elements 2r / 2r + 1 of
    // piece j (mt = 4j + r); columns are the tokens.
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      const int j = mt / 4;
      uint32_t a0, a1;
      auto pair = [&](const Vec& x, const Vec& y, uint32_t& lo, uint32_t& hi) {
        switch (mt % 4) {
          case 0: C::template v_pair<0>(x, y, lo, hi); break;
          case 1: C::template v_pair<1>(x, y, lo, hi); break;
          case 2: C::template v_pair<2>(x, y, lo, hi); break;
          default: C::template v_pair<3>(x, y, lo, hi); break;
        }
      };
      pair(vv[0][j], vv[1][j], a0, a1);
      if constexpr (TN == 2) {
        uint32_t a2, a3;
        pair(vv[2][j], vv[3][j], a2, a3);
        mma_k16<F16>(o[mt], a0, a1, a2, a3, ph[0], ph[1]);
        if constexpr (!F16) mma_k16<F16>(o[mt], a0, a1, a2, a3, pl[0], pl[1]);
      } else {
        mma_k8<F16>(o[mt], a0, a1, ph[0]);
        if constexpr (!F16) mma_k8<F16>(o[mt], a0, a1, pl[0]);
      }
    }
  };

  // Staging in dynamic shared memory when the launch gives room for it
  // (kStages stages per warp): each warp copies its own tiles with cp.async
  // kStages - 1 tiles ahead of the one it computes, without holding
  // registers. A stage holds the tile's TT K rows, then its TT V rows,
  // `pitch` bytes each; within each 128-byte line the 16-byte pieces of row
  // r are permuted (byte offset XOR kx(r) for K, vx(r) for V) so that the
  // fragment reads below touch every bank once per phase.
  const uint32_t row_bytes = D * uint32_t(sizeof(T));
  const uint32_t pitch = (row_bytes + 127) / 128 * 128;
  const uint32_t stage_bytes = 2 * TT * pitch;
  const bool aligned = ((reinterpret_cast<uintptr_t>(kc) | reinterpret_cast<uintptr_t>(vc) |
                         (p.block_stride * sizeof(T)) | row_bytes) %
                        16) == 0;
  if (aligned && dynamic_smem_bytes() >= kWarps * kStages * stage_bytes) {
    auto kx = [](uint32_t r) { return (r % (4 / sizeof(T))) * (32 * uint32_t(sizeof(T))); };
    auto vx = [](uint32_t r) { return ((r >> 1) & 3u) * 32; };
    const uint32_t my_stages =
        uint32_t(__cvta_generic_to_shared(dyn)) + warp * kStages * stage_bytes;
    // The block ids of the copies, kBatch tiles at a time: lane l holds token
    // l % TT of tile l / TT of the batch. The next batch loads while this one
    // is copied, so no copy waits on the block table.
    constexpr uint32_t kBatch = 32 / TT;
    auto batch_of = [&](uint32_t tile) {
      const uint32_t tok = tile + (lane / TT) * kStride + lane % TT;
      return in_range(tok) ? bt[bdiv.div(tok)] : 0;
    };
    uint32_t copy_tile = base, copy_stage = 0, copy_in_batch = 0;
    int32_t batch_blk = batch_of(base), next_batch_blk = batch_of(base + kBatch * kStride);
    // The next tile's rows into the next stage: 16-byte chunk x of its K and
    // V rows (row x / R, chunk x % R) for x = lane + 32 k. When R divides 32
    // (power-of-two head_dim) a lane keeps one chunk and steps 32 / R rows;
    // else it walks (row, chunk) without dividing. Past the range the group
    // is empty, so the wait counts stay uniform and nothing is left in
    // flight once the tiles are done.
    const uint32_t R = row_bytes / 16;
    const uint32_t steps = (TT * R + 31) / 32;
    const sparkrt_kernels::BlockDiv rdiv(R);  // shifts for power-of-two head_dim
    const uint32_t r_lane = rdiv.div(lane), c_lane = rdiv.mod(lane), r_step = rdiv.div(32),
                   c_step = rdiv.mod(32);
    constexpr uint32_t kMaxSteps = (TT * NKC * 2 * sizeof(T) + 31) / 32;  // head_dim 32 NKC
    const uint64_t policy = sparkrt_kernels::evict_first_policy();
    // A tile within one block (below): this lane's first chunk from the
    // tile's first K row, the step between the lane's rows, and V from K, in
    // bytes (one flat address space: the caches may be separate allocations).
    const uint64_t lane_src = uint64_t{r_lane} * row * sizeof(T) + 16 * c_lane;
    const uint64_t step_bytes = uint64_t{r_step} * row * sizeof(T);
    const ptrdiff_t v_delta =
        ptrdiff_t(reinterpret_cast<uintptr_t>(vc) - reinterpret_cast<uintptr_t>(kc));
    auto copy_chunk = [&](uint32_t dst, uint32_t r, uint32_t ch) {
      const int32_t b = __shfl_sync(kFull, batch_blk, copy_in_batch * TT + (r < TT ? r : 0));
      const uint32_t tok = copy_tile + r;
      if (r >= TT) return;
      const bool on = in_range(tok);  // else zeros: the tile's ends outside the range
      const uint64_t off = on ? row_off(b, tok) : 0;
      const uint32_t cb = 16 * ch;
      cp_async16(dst + r * pitch + (cb ^ kx(r)), reinterpret_cast<const char*>(kc + off) + cb,
                 on ? 16 : 0, policy);
      cp_async16(dst + (TT + r) * pitch + (cb ^ vx(r)),
                 reinterpret_cast<const char*>(vc + off) + cb, on ? 16 : 0, policy);
    };
    auto copy_next = [&] {
      if (copy_tile < t1) {
        const uint32_t dst = my_stages + copy_stage * stage_bytes;
        const uint32_t m0 = bdiv.mod(copy_tile);
        if (c_step == 0 && copy_tile >= t0 && copy_tile + TT <= t1 && m0 + TT <= p.block_size) {
          // The whole tile in range and in one block (every tile but a
          // range's first and last when TT divides the block size): one
          // block id, and rows `row` elements apart. This path takes about a
          // third of the general one's instructions.
          const int32_t b = __shfl_sync(kFull, batch_blk, copy_in_batch * TT);
          const char* src =
              reinterpret_cast<const char*>(
                  kc + (uint64_t(uint32_t(b)) * p.block_stride + uint64_t{m0} * row + head_off)) +
              lane_src;
#pragma unroll
          for (uint32_t k = 0; k < kMaxSteps; ++k) {
            const uint32_t r = r_lane + k * r_step;
            if (k < steps && r < TT) {
              const char* s = src + k * step_bytes;
              cp_async16(dst + r * pitch + ((16 * c_lane) ^ kx(r)), s, 16, policy);
              cp_async16(dst + (TT + r) * pitch + ((16 * c_lane) ^ vx(r)), s + v_delta, 16, policy);
            }
          }
        } else if (c_step == 0) {
#pragma unroll
          for (uint32_t k = 0; k < kMaxSteps; ++k)
            if (k < steps) copy_chunk(dst, r_lane + k * r_step, c_lane);
        } else {
          uint32_t r = r_lane, ch = c_lane;
          for (uint32_t k = 0; k < steps; ++k) {
            copy_chunk(dst, r, ch);
            ch += c_step;
            r += r_step;
            if (ch >= R) {
              ch -= R;
              ++r;
            }
          }
        }
      }
      cp_async_commit();
      copy_tile += kStride;
      copy_stage = copy_stage + 1 == kStages ? 0 : copy_stage + 1;
      if (++copy_in_batch == kBatch) {
        copy_in_batch = 0;
        batch_blk = next_batch_blk;
        next_batch_blk = batch_of(copy_tile + kBatch * kStride);
      }
    };
    for (uint32_t s = 0; s + 1 < kStages; ++s) copy_next();
    for (uint32_t stage = 0; base < t1; base += kStride) {
      __syncwarp();  // every lane is done reading the stage copy_next refills
      copy_next();
      cp_async_wait<kStages - 1>();
      __syncwarp();  // every lane's copies of this tile are visible
      const uint32_t src = my_stages + stage * stage_bytes;
      stage = stage + 1 == kStages ? 0 : stage + 1;
      // The pieces the register loop below loads, from the stage.
      Vec kv[TN][NKC];
#pragma unroll
      for (int nt = 0; nt < TN; ++nt) {
        const uint32_t r = 8 * nt + g;
#pragma unroll
        for (int i = 0; i < NKC; ++i) {
          const uint32_t pb = uint32_t(sizeof(Vec)) * (c + 4 * i);
          kv[nt][i] = 8 * (c + 4 * i) < D ? lds(src + r * pitch + (pb ^ kx(r)), &kv[nt][i]) : Vec{};
        }
      }
      Vec vv[2 * TN][NVC];
#pragma unroll
      for (int nt = 0; nt < TN; ++nt)
#pragma unroll
        for (int u = 0; u < 2; ++u) {
          const uint32_t r = 8 * nt + 2 * c + u;
#pragma unroll
          for (int j = 0; j < NVC; ++j) {
            const uint32_t pb = uint32_t(sizeof(Vec)) * (g + 8 * j);
            vv[2 * nt + u][j] = 8 * (g + 8 * j) < D
                                    ? lds(src + (TT + r) * pitch + (pb ^ vx(r)), &vv[2 * nt + u][j])
                                    : Vec{};
          }
        }
      consume(base, kv, vv, [] {});
    }
  } else {
    // Registers: each tile's rows are loaded straight into the lanes' pieces.
    int32_t blk = block_of(base);
    if constexpr (SPARKRT_PA_PREFETCH >= 2) {
      for (int d = 1; d < SPARKRT_PA_PREFETCH; ++d)
        prefetch_tile(base + d * kStride, block_of(base + d * kStride));
    }
    for (; base < t1; base += kStride) {
      // K: lane (g, c) reads token base + 8 nt + g, pieces c + 4i.
      Vec kv[TN][NKC];
#pragma unroll
      for (int nt = 0; nt < TN; ++nt) {
        const uint32_t tok = base + 8 * nt + g;
        const int32_t b = __shfl_sync(kFull, blk, 8 * nt + g);
        const uint64_t off = row_off(b, tok) + 8 * c;
#pragma unroll
        for (int i = 0; i < NKC; ++i) {
          if (in_range(tok) && 8 * (c + 4 * i) < D)
            kv[nt][i] = load_stream(reinterpret_cast<const Vec*>(kc + off + 32 * i));
          else
            kv[nt][i] = Vec{};
        }
      }
      // V: lane (g, c) reads tokens base + 8 nt + 2c + u (index 2 nt + u),
      // pieces g + 8j.
      Vec vv[2 * TN][NVC];
#pragma unroll
      for (int nt = 0; nt < TN; ++nt)
#pragma unroll
        for (int u = 0; u < 2; ++u) {
          const uint32_t tok = base + 8 * nt + 2 * c + u;
          const int32_t b = __shfl_sync(kFull, blk, 8 * nt + 2 * c + u);
          const uint64_t off = row_off(b, tok) + 8 * g;
#pragma unroll
          for (int j = 0; j < NVC; ++j) {
            if (in_range(tok) && 8 * (g + 8 * j) < D)
              vv[2 * nt + u][j] = load_stream(reinterpret_cast<const Vec*>(vc + off + 64 * j));
            else
              vv[2 * nt + u][j] = Vec{};
          }
        }
      const int32_t blk_next = block_of(base + kStride);
      int32_t blk_ahead = blk_next;
      if constexpr (SPARKRT_PA_PREFETCH >= 2)
        blk_ahead = block_of(base + SPARKRT_PA_PREFETCH * kStride);
      consume(base, kv, vv, [&] {
        if constexpr (SPARKRT_PA_PREFETCH >= 1)
          prefetch_tile(base + SPARKRT_PA_PREFETCH * kStride, blk_ahead);
      });
      blk = blk_next;
    }
  }

  // Merge the warps: a common max per head, then a tree sum of the
  // accumulators through shared memory.
  l_run += __shfl_xor_sync(kFull, l_run, 1);
  l_run += __shfl_xor_sync(kFull, l_run, 2);
  if (c == 0) {
    sm.ml[warp][g][0] = m_run;
    sm.ml[warp][g][1] = l_run;
  }
  __syncthreads();
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
  // Writes element k of this lane's accumulators (m-tile k / 4, register
  // k % 4), summed over the warps: out for the one-pass entries, else the
  // unnormalised partial (warp 0 also writes the (max, sum) pairs).
  auto write = [&](uint32_t k, float v) {
    const uint32_t mt = k / 4, r = (k % 4) / 2, q = k % 2;
    const uint32_t h = 2 * c + q, d = 8 * (g + 8 * (mt / 4)) + 2 * (mt % 4) + r;
    if (h >= hpc || d >= D) return;
    const uint64_t qrow = uint64_t{seq} * p.num_q_heads + head0 + h;
    if (p.num_splits == 0) {
      const float l = q == 0 ? lh[0] : lh[1];
      p.out[qrow * D + d] = __float2bfloat16_rn(l > 0.f ? v * (p.v_scale / l) : 0.f);
    } else {
      p.part_acc[(qrow * p.num_splits + blockIdx.z) * D + d] = v * p.v_scale;
    }
  };
  if (p.num_splits != 0 && warp == 0 && g == 0) {
#pragma unroll
    for (int q = 0; q < 2; ++q) {
      const uint32_t h = 2 * c + q;
      if (h >= hpc) continue;
      const uint64_t prow =
          (uint64_t{seq} * p.num_q_heads + head0 + h) * p.num_splits + blockIdx.z;
      p.part_ml[2 * prow] = mh[q];
      p.part_ml[2 * prow + 1] = lh[q];
    }
  }
  constexpr uint32_t kSlot = 4 * MT * 32;  // floats of one warp's accumulators
  if (dynamic_smem_bytes() >= kWarps * kSlot * sizeof(float)) {
    // Every warp's accumulators into dynamic shared memory at once; warp w
    // then sums elements [w E, (w + 1) E) of each lane over the warps and
    // writes them.
    float* red = reinterpret_cast<float*>(dyn);
#pragma unroll
    for (int k = 0; k < 4 * MT; ++k) red[(warp * 4 * MT + k) * 32 + lane] = o[k / 4][k % 4];
    __syncthreads();
    constexpr int E = 4 * MT / kWarps;
    static_assert(E * kWarps == 4 * MT, "the warps share the elements evenly");
#pragma unroll
    for (int e = 0; e < E; ++e) {
      const uint32_t k = warp * E + e;
      float v = 0.f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) v += red[(w * 4 * MT + k) * 32 + lane];
      write(k, v);
    }
  } else {
    // A tree sum through the static buffer, `red_cap` warps at a time (or
    // dynamic shared memory if it holds half the warps'), then warp 0 writes.
    float* red = sm.red;
    uint32_t red_cap = uint32_t(sizeof(sm.red) / sizeof(float)) / kSlot;
    if (dynamic_smem_bytes() >= (kWarps / 2) * kSlot * sizeof(float)) {
      red = reinterpret_cast<float*>(dyn);
      red_cap = kWarps / 2;
    }
    for (uint32_t half = kWarps / 2; half >= 1; half /= 2) {
      for (uint32_t c0 = 0; c0 < half; c0 += red_cap) {
        const uint32_t n = min(red_cap, half - c0);  // warps half + c0 + i add into c0 + i
        const uint32_t w = uint32_t(warp);
        if (w >= half + c0 && w < half + c0 + n) {
          float* slot = red + (w - half - c0) * kSlot;
#pragma unroll
          for (int k = 0; k < 4 * MT; ++k) slot[k * 32 + lane] = o[k / 4][k % 4];
        }
        __syncthreads();
        if (w >= c0 && w < c0 + n) {
          const float* slot = red + (w - c0) * kSlot;
#pragma unroll
          for (int k = 0; k < 4 * MT; ++k) o[k / 4][k % 4] += slot[k * 32 + lane];
        }
        __syncthreads();
      }
    }
    if (warp == 0) {
#pragma unroll
      for (int k = 0; k < 4 * MT; ++k) write(k, o[k / 4][k % 4]);
    }
  }
  // Every warp takes part in the merge from this one call (its barriers
  // must be reached converged).
  if constexpr (MERGE) merge_splits(p, hpc);
}

// Chooses the instance for this launch: the lane layout from head_dim, the
// heads per CTA from the grid. Launches outside the contract return without
// writing (the op wrapper validates shapes first).
template <typename T, bool MERGE = false>
__device__ __forceinline__ void dispatch(const Params& p) {
  __shared__ __align__(16) Smem sm;
  extern __shared__ __align__(128) unsigned char dyn[];
  const uint32_t D = p.head_dim;
  if (D == 0 || D % 8 != 0 || D > kMaxHeadDim || p.num_kv_heads == 0 || p.block_size == 0 ||
      p.num_splits > 65535)  // more splits than a grid has z
    return;
  // Divisions checked by multiplying back: each costs a dozen instructions,
  // and this runs once per CTA.
  const uint32_t hpc = p.num_q_heads / gridDim.x;
  const uint32_t group = p.num_q_heads / p.num_kv_heads;
  if (hpc == 0 || hpc > kMaxHpc || hpc * gridDim.x != p.num_q_heads ||
      group * p.num_kv_heads != p.num_q_heads)
    return;
  const uint32_t ctas_per_kv = group / hpc;  // CTAs sharing one KV head
  if (ctas_per_kv * hpc != group) return;
  const uint32_t kvh = ctas_per_kv == 1 ? blockIdx.x : blockIdx.x / ctas_per_kv;
  // TN as contract::tile_tokens(D, sizeof(T)) / 8, which the host sizes the
  // staging with.
  if (D <= 64) return decode<T, 2, 1, contract::kTileGroupsD64, MERGE>(p, hpc, kvh, sm, dyn);
  if (D <= 128) return decode<T, 4, 2, Cache<T>::kGroupsD128, MERGE>(p, hpc, kvh, sm, dyn);
  return decode<T, 8, 4, contract::kTileGroupsD256, MERGE>(p, hpc, kvh, sm, dyn);
}

__device__ __forceinline__ Params make_params(const __nv_bfloat16* q, const void* k_cache,
                                              const void* v_cache, const int32_t* block_tables,
                                              const int32_t* seq_lens, uint32_t max_blocks_per_seq,
                                              uint32_t num_q_heads, uint32_t num_kv_heads,
                                              uint32_t head_dim, uint32_t block_size,
                                              uint32_t q_stride, uint32_t sliding_window) {
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
  p.q_stride = q_stride;
  p.sliding_window = sliding_window;
  p.block_stride = uint64_t{block_size} * num_kv_heads * head_dim;
  p.v_scale = 1.f;
  return p;
}

}  // namespace

#define SPARKRT_DECODE_BOUNDS __launch_bounds__(kThreads, SPARKRT_PA_MIN_CTAS)
#define SPARKRT_DECODE_BOUNDS_FP8 __launch_bounds__(kThreads, SPARKRT_PA_MIN_CTAS_FP8)

// Grid (num_q_heads / hpc, num_seqs), block 256; hpc <= 8 divides
// num_q_heads / num_kv_heads.
extern "C" __global__ void SPARKRT_DECODE_BOUNDS paged_decode_attn_bf16(
    const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ k_cache,
    const __nv_bfloat16* __restrict__ v_cache, __nv_bfloat16* __restrict__ out,
    const int32_t* __restrict__ block_tables, const int32_t* __restrict__ seq_lens,
    uint32_t max_blocks_per_seq, uint32_t num_q_heads, uint32_t num_kv_heads, uint32_t head_dim,
    uint32_t block_size, float inv_sqrt_d, uint32_t q_stride, uint32_t sliding_window) {
  sparkrt_kernels::dependent_launch_sync();
  Params p = make_params(q, k_cache, v_cache, block_tables, seq_lens, max_blocks_per_seq,
                         num_q_heads, num_kv_heads, head_dim, block_size, q_stride, sliding_window);
  p.out = out;
  p.q_scale = inv_sqrt_d * kLog2e;
  dispatch<__nv_bfloat16>(p);
}

extern "C" __global__ void SPARKRT_DECODE_BOUNDS_FP8 paged_decode_attn_fp8(
    const __nv_bfloat16* __restrict__ q, const __nv_fp8_storage_t* __restrict__ k_cache,
    const __nv_fp8_storage_t* __restrict__ v_cache, __nv_bfloat16* __restrict__ out,
    const int32_t* __restrict__ block_tables, const int32_t* __restrict__ seq_lens,
    uint32_t max_blocks_per_seq, uint32_t num_q_heads, uint32_t num_kv_heads, uint32_t head_dim,
    uint32_t block_size, float inv_sqrt_d, float k_scale, float v_scale, uint32_t q_stride,
    uint64_t cache_stride, uint32_t sliding_window) {
  sparkrt_kernels::dependent_launch_sync();
  Params p = make_params(q, k_cache, v_cache, block_tables, seq_lens, max_blocks_per_seq,
                         num_q_heads, num_kv_heads, head_dim, block_size, q_stride, sliding_window);
  p.out = out;
  p.q_scale = inv_sqrt_d * kLog2e * k_scale;
  p.v_scale = v_scale;
  p.block_stride = cache_stride;
  dispatch<__nv_fp8_storage_t>(p);
}

// Split-KV: grid (num_q_heads / hpc, num_seqs, num_splits). Split z takes
// tokens [a + z * per, a + (z + 1) * per) of the sequence's range [t0, t1),
// clamped to it, where a is t0 rounded down to a multiple of 16 and per =
// 16 * ceil((t1 - a) / (16 * num_splits)), and writes its unnormalised
// output (times v_scale) and its (max, sum) in base 2 to the workspace.
extern "C" __global__ void SPARKRT_DECODE_BOUNDS paged_decode_attn_bf16_split(
    const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ k_cache,
    const __nv_bfloat16* __restrict__ v_cache, float* __restrict__ part_acc,
    float* __restrict__ part_ml, const int32_t* __restrict__ block_tables,
    const int32_t* __restrict__ seq_lens, uint32_t max_blocks_per_seq, uint32_t num_q_heads,
    uint32_t num_kv_heads, uint32_t head_dim, uint32_t block_size, float inv_sqrt_d,
    uint32_t q_stride, uint32_t sliding_window, uint32_t num_splits) {
  sparkrt_kernels::dependent_launch_sync();
  if (num_splits == 0 || blockIdx.z >= num_splits) return;
  Params p = make_params(q, k_cache, v_cache, block_tables, seq_lens, max_blocks_per_seq,
                         num_q_heads, num_kv_heads, head_dim, block_size, q_stride, sliding_window);
  p.part_acc = part_acc;
  p.part_ml = part_ml;
  p.num_splits = num_splits;
  p.q_scale = inv_sqrt_d * kLog2e;
  dispatch<__nv_bfloat16>(p);
}

extern "C" __global__ void SPARKRT_DECODE_BOUNDS_FP8 paged_decode_attn_fp8_split(
    const __nv_bfloat16* __restrict__ q, const __nv_fp8_storage_t* __restrict__ k_cache,
    const __nv_fp8_storage_t* __restrict__ v_cache, float* __restrict__ part_acc,
    float* __restrict__ part_ml, const int32_t* __restrict__ block_tables,
    const int32_t* __restrict__ seq_lens, uint32_t max_blocks_per_seq, uint32_t num_q_heads,
    uint32_t num_kv_heads, uint32_t head_dim, uint32_t block_size, float inv_sqrt_d,
    float k_scale, float v_scale, uint32_t q_stride, uint64_t cache_stride,
    uint32_t sliding_window, uint32_t num_splits) {
  sparkrt_kernels::dependent_launch_sync();
  if (num_splits == 0 || blockIdx.z >= num_splits) return;
  Params p = make_params(q, k_cache, v_cache, block_tables, seq_lens, max_blocks_per_seq,
                         num_q_heads, num_kv_heads, head_dim, block_size, q_stride, sliding_window);
  p.part_acc = part_acc;
  p.part_ml = part_ml;
  p.num_splits = num_splits;
  p.q_scale = inv_sqrt_d * kLog2e * k_scale;
  p.v_scale = v_scale;
  p.block_stride = cache_stride;
  dispatch<__nv_fp8_storage_t>(p);
}

// Split-merge: the split entries' work, then the last CTA of each (sequence,
// head group) to finish merges the group's partials into `out` (as
// paged_decode_attn_combine), so split-KV is one launch. `counters` is
// u32[num_seqs][grid.x], zero at launch and zero again after it.
extern "C" __global__ void SPARKRT_DECODE_BOUNDS paged_decode_attn_bf16_split_merge(
    const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ k_cache,
    const __nv_bfloat16* __restrict__ v_cache, __nv_bfloat16* __restrict__ out,
    float* __restrict__ part_acc, float* __restrict__ part_ml, uint32_t* __restrict__ counters,
    const int32_t* __restrict__ block_tables, const int32_t* __restrict__ seq_lens,
    uint32_t max_blocks_per_seq, uint32_t num_q_heads, uint32_t num_kv_heads, uint32_t head_dim,
    uint32_t block_size, float inv_sqrt_d, uint32_t q_stride, uint32_t sliding_window,
    uint32_t num_splits) {
  sparkrt_kernels::dependent_launch_sync();
  if (num_splits == 0 || blockIdx.z >= num_splits || counters == nullptr) return;
  Params p = make_params(q, k_cache, v_cache, block_tables, seq_lens, max_blocks_per_seq,
                         num_q_heads, num_kv_heads, head_dim, block_size, q_stride, sliding_window);
  p.out = out;
  p.part_acc = part_acc;
  p.part_ml = part_ml;
  p.counters = counters;
  p.num_splits = num_splits;
  p.q_scale = inv_sqrt_d * kLog2e;
  dispatch<__nv_bfloat16, true>(p);
}

extern "C" __global__ void SPARKRT_DECODE_BOUNDS_FP8 paged_decode_attn_fp8_split_merge(
    const __nv_bfloat16* __restrict__ q, const __nv_fp8_storage_t* __restrict__ k_cache,
    const __nv_fp8_storage_t* __restrict__ v_cache, __nv_bfloat16* __restrict__ out,
    float* __restrict__ part_acc, float* __restrict__ part_ml, uint32_t* __restrict__ counters,
    const int32_t* __restrict__ block_tables, const int32_t* __restrict__ seq_lens,
    uint32_t max_blocks_per_seq, uint32_t num_q_heads, uint32_t num_kv_heads, uint32_t head_dim,
    uint32_t block_size, float inv_sqrt_d, float k_scale, float v_scale, uint32_t q_stride,
    uint64_t cache_stride, uint32_t sliding_window, uint32_t num_splits) {
  sparkrt_kernels::dependent_launch_sync();
  if (num_splits == 0 || blockIdx.z >= num_splits || counters == nullptr) return;
  Params p = make_params(q, k_cache, v_cache, block_tables, seq_lens, max_blocks_per_seq,
                         num_q_heads, num_kv_heads, head_dim, block_size, q_stride, sliding_window);
  p.out = out;
  p.part_acc = part_acc;
  p.part_ml = part_ml;
  p.counters = counters;
  p.num_splits = num_splits;
  p.q_scale = inv_sqrt_d * kLog2e * k_scale;
  p.v_scale = v_scale;
  p.block_stride = cache_stride;
  dispatch<__nv_fp8_storage_t, true>(p);
}

// Merges the splits of one (sequence, query head): grid (num_q_heads,
// num_seqs), block 256. out = sum_z 2^(m_z - M) acc_z / sum_z 2^(m_z - M) l_z,
// zeros when every split was empty. The weights are computed once into
// shared memory; each thread then sums its dims over the splits with
// independent loads.
extern "C" __global__ void __launch_bounds__(kThreads) paged_decode_attn_combine(
    const float* __restrict__ part_acc, const float* __restrict__ part_ml,
    __nv_bfloat16* __restrict__ out, uint32_t num_q_heads, uint32_t head_dim,
    uint32_t num_splits) {
  sparkrt_kernels::dependent_launch_sync();
  constexpr uint32_t kMaxSplits = contract::kCombineMaxSplits;  // one weight per thread
  __shared__ float wz[kMaxSplits];
  __shared__ float s_m[kWarps], s_l[kWarps];
  const uint64_t qrow = uint64_t{blockIdx.y} * num_q_heads + blockIdx.x;
  const float* ml = part_ml + qrow * num_splits * 2;
  const float* acc = part_acc + qrow * num_splits * head_dim;
  if (num_splits > kMaxSplits) {  // more splits than the op makes: plain loops
    float m = -INFINITY;
    for (uint32_t z = 0; z < num_splits; ++z)
      if (ml[2 * z + 1] > 0.f) m = fmaxf(m, ml[2 * z]);
    float l = 0.f;
    if (m != -INFINITY)
      for (uint32_t z = 0; z < num_splits; ++z)
        if (ml[2 * z + 1] > 0.f) l += exp2f(ml[2 * z] - m) * ml[2 * z + 1];
    for (uint32_t d = threadIdx.x; d < head_dim; d += blockDim.x) {
      float o = 0.f;
      if (l > 0.f) {
        for (uint32_t z = 0; z < num_splits; ++z)
          if (ml[2 * z + 1] > 0.f) o += exp2f(ml[2 * z] - m) * acc[uint64_t{z} * head_dim + d];
        o /= l;
      }
      out[qrow * head_dim + d] = __float2bfloat16_rn(o);
    }
    return;
  }
  const uint32_t lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  float mz = -INFINITY, lz = 0.f;
  if (threadIdx.x < num_splits) {
    mz = ml[2 * threadIdx.x];
    lz = ml[2 * threadIdx.x + 1];
    if (!(lz > 0.f)) mz = -INFINITY;  // an empty split takes no part
  }
  float m = mz;
#pragma unroll
  for (int k = 16; k >= 1; k /= 2) m = fmaxf(m, __shfl_xor_sync(kFull, m, k));
  if (lane == 0) s_m[warp] = m;
  __syncthreads();
  m = s_m[0];
#pragma unroll
  for (int w = 1; w < kWarps; ++w) m = fmaxf(m, s_m[w]);
  const float w_mine = (m != -INFINITY && lz > 0.f) ? exp2f(mz - m) : 0.f;
  if (threadIdx.x < num_splits) wz[threadIdx.x] = w_mine;
  float l = w_mine * lz;
#pragma unroll
  for (int k = 16; k >= 1; k /= 2) l += __shfl_xor_sync(kFull, l, k);
  if (lane == 0) s_l[warp] = l;
  __syncthreads();
  l = 0.f;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) l += s_l[w];
  __syncthreads();  // wz complete
  // A split without tokens takes no part (weight 0, its partial not read).
  auto term = [&](uint32_t z, uint32_t d) {
    const float w = wz[z];
    return w != 0.f ? w * acc[uint64_t{z} * head_dim + d] : 0.f;
  };
  for (uint32_t d = threadIdx.x; d < head_dim; d += blockDim.x) {
    float o0 = 0.f, o1 = 0.f, o2 = 0.f, o3 = 0.f;
    uint32_t z = 0;
    for (; z + 4 <= num_splits; z += 4) {
      o0 += term(z, d);
      o1 += term(z + 1, d);
      o2 += term(z + 2, d);
      o3 += term(z + 3, d);
    }
    for (; z < num_splits; ++z) o0 += term(z, d);
    out[qrow * head_dim + d] = __float2bfloat16_rn(l > 0.f ? ((o0 + o1) + (o2 + o3)) / l : 0.f);
  }
}
