// paged_attention: decode attention (one query token per sequence) over a
// paged KV cache in bf16 or fp8 E4M3. Contracts and geometry in
// docs/kernels.md ("Module paged_attention").
//
// Design. Decode attention reads each K and V row once and does a few flops
// per byte, so it is bound by memory bandwidth if enough loads are in flight.
// A CTA of 256 threads serves `hpc` query heads (1, 2 or 4) that share one
// KV head, so K/V are read once for all of them. A token row (head_dim
// elements) is read by a group of head_dim/8 lanes, 8 elements each (16-byte
// loads for bf16, 8-byte for fp8). Each warp walks its own share of the
// tokens with its own online softmax (base 2: q is pre-scaled by
// inv_sqrt_d * log2(e)) and no barrier, so the SM's warps overlap one
// another's load latency. Per iteration a lane group loads K and V of a few
// tokens at once, computes the hpc dot products (a reduce-scatter over the
// group's lanes leaves each lane one head's score), updates the running max
// and sum, and accumulates weight * V for its 8 dims of every head. At the end
// the warps' partial results are merged through shared memory.
// The split entries run the same loop on a slice of the tokens
// (blockIdx.z of num_splits) and write unnormalised partials that
// paged_decode_attn_combine merges.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "sparkrt_kernel_utils.cuh"

namespace {

using namespace sparkrt_kernels;

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxHpc = 4;
constexpr int kMaxHeadDim = 256;
constexpr float kLog2e = 1.4426950408889634f;

// Per cache dtype: the load of one lane's 8 elements and its conversion.
template <typename T>
struct Cache;
template <>
struct Cache<__nv_bfloat16> {
  using Vec = uint4;                      // 8 x bf16
  static constexpr int kTokensPerLane = 4;  // 64 bytes each of K and V in flight per lane
  static constexpr int kTokensPerLaneHpc4 = 4;
  // Loads issued per iteration, waited for at once: measured faster for
  // bf16 on the H200 than the pipelined schedule, which costs registers that
  // bf16 rows need for loads in flight (docs/benchmarks.md).
  static constexpr bool kPipelined = false;
  static __device__ __forceinline__ void to_float(const Vec& v, float (&f)[8]) {
    bf16x8_to_float(v, f);
  }
};
template <>
struct Cache<__nv_fp8_storage_t> {
  using Vec = uint2;                      // 8 x e4m3
  static constexpr int kTokensPerLane = 5;  // 40 bytes each of K and V in flight per lane
  static constexpr int kTokensPerLaneHpc4 = 4;
  // The next iteration's K and V loads are issued while this one computes:
  // fp8 rows do more arithmetic per byte, and this hides their latency.
  static constexpr bool kPipelined = true;
  static __device__ __forceinline__ void to_float(const Vec& v, float (&f)[8]) {
    fp8x8_to_float(v, f);
  }
};

struct Params {
  const __nv_bfloat16* q;
  const void* k_cache;
  const void* v_cache;
  __nv_bfloat16* out;       // non-split: [num_seqs][num_q_heads][head_dim]
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
};

// Sums s[0..HPC) over the LPT lanes of a group so that every lane ends with
// the full sum of one head: halving exchanges first (HPC - 1 shuffles in all),
// then plain butterflies. Returns the sum; *head says which head it is.
template <int LPT, int HPC>
__device__ __forceinline__ float reduce_scatter(float (&s)[HPC], int li, int* head) {
  int h = 0;
  int mask = LPT / 2;
#pragma unroll
  for (int n = HPC; n > 1; n /= 2, mask /= 2) {
    const bool upper = (li & mask) != 0;
#pragma unroll
    for (int i = 0; i < n / 2; ++i) {
      const float send = upper ? s[i] : s[i + n / 2];
      const float keep = upper ? s[i + n / 2] : s[i];
      s[i] = keep + __shfl_xor_sync(0xffffffffu, send, mask);
    }
    if (upper) h += n / 2;
  }
#pragma unroll
  for (int m = LPT / (2 * HPC); m >= 1; m /= 2) s[0] += __shfl_xor_sync(0xffffffffu, s[0], m);
  *head = h;
  return s[0];
}

// x / d and x % d for a divisor fixed per launch: shifts for a power of two
// (the usual block sizes), else the division.
struct BlockDiv {
  uint32_t d, shift;
  bool pow2;
  __device__ explicit BlockDiv(uint32_t divisor)
      : d(divisor), shift(__ffs(divisor) - 1), pow2((divisor & (divisor - 1)) == 0) {}
  __device__ __forceinline__ uint32_t div(uint32_t x) const { return pow2 ? x >> shift : x / d; }
  __device__ __forceinline__ uint32_t mod(uint32_t x) const {
    return pow2 ? x & (d - 1) : x % d;
  }
};

template <typename T, int LPT, int HPC>
__device__ __forceinline__ void decode(const Params& p, float* red, float* s_ml) {
  using C = Cache<T>;
  using Vec = typename C::Vec;
  // Four heads' q and accumulators leave fewer registers for rows in flight.
  constexpr int TPL = HPC == 4 && LPT < 32 ? C::kTokensPerLaneHpc4 : C::kTokensPerLane;
  constexpr int GPW = 32 / LPT;       // lane groups per warp
  constexpr int WT = GPW * TPL;       // tokens per warp iteration
  constexpr int kHeadLanes = LPT / HPC;
  static_assert(HPC <= kMaxHpc && LPT >= HPC, "layout");

  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int li = lane % LPT;         // lane within its group
  const int gw = lane / LPT;         // group within the warp
  const int my_head = li / kHeadLanes;  // the head whose score reduce_scatter leaves here
  const int group_base = lane - li;
  const uint32_t D = p.head_dim;
  const bool active = uint32_t(li) * 8 < D;  // head_dim below the group's width

  const uint32_t seq = blockIdx.y;
  const uint32_t head0 = blockIdx.x * HPC;
  const uint32_t group = p.num_q_heads / p.num_kv_heads;
  const uint32_t kvh = head0 / group;

  // The token range: the window, clamped to the block table, then the split.
  // Token indices fit 32 bits: seq_lens are i32.
  const int32_t sl = p.seq_lens[seq];
  const uint64_t cap = uint64_t{p.max_blocks_per_seq} * p.block_size;
  const uint32_t len = sl <= 0 ? 0u : uint32_t(uint64_t(sl) < cap ? uint64_t(sl) : cap);
  uint32_t t0 = (p.sliding_window > 0 && len > p.sliding_window) ? len - p.sliding_window : 0;
  uint32_t t1 = len;
  if (p.num_splits > 0) {
    const uint32_t per = (t1 - t0 + p.num_splits - 1) / p.num_splits;
    const uint64_t b = t0 + uint64_t{per} * blockIdx.z;
    t0 = b < t1 ? uint32_t(b) : t1;
    t1 = b + per < t1 ? uint32_t(b + per) : t1;
  }
  const BlockDiv bdiv(p.block_size);

  // q for my 8 dims of each head, pre-scaled.
  float q[HPC][8];
#pragma unroll
  for (int h = 0; h < HPC; ++h) {
    const __nv_bfloat16* qh = p.q + uint64_t{seq} * p.q_stride + uint64_t{head0 + h} * D + li * 8;
#pragma unroll
    for (int j = 0; j < 8; ++j) q[h][j] = active ? __bfloat162float(qh[j]) * p.q_scale : 0.f;
  }
  float acc[HPC][8];
#pragma unroll
  for (int h = 0; h < HPC; ++h)
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[h][j] = 0.f;
  // Running max (warp-wide) and this group's running sum, for my_head.
  float m_run = -INFINITY, l_run = 0.f;

  const T* kc = static_cast<const T*>(p.k_cache);
  const T* vc = static_cast<const T*>(p.v_cache);
  const int32_t* bt = p.block_tables + uint64_t{seq} * p.max_blocks_per_seq;
  const uint64_t row = uint64_t{p.num_kv_heads} * D;
  const uint64_t lane_off = uint64_t{kvh} * D + li * 8;

  // Two schedules of the same loop (see Cache<T>::kPipelined).
  if constexpr (C::kPipelined) {
    // Each warp walks its own tokens with its own online softmax: no barrier
    // in the loop, so the SM's warps overlap one another's load latency.
    // Iteration tokens: base + gw + GPW * i. Loads run one iteration ahead:
    // K of the next iteration is issued as soon as this one's scores are done
    // and V of the next as soon as this one's weighted sum is, so each lane
    // always has loads in flight while it computes, with one K and one V set
    // of registers.
    constexpr uint32_t kStride = kWarps * WT;
    auto tok_of = [&](uint32_t b, int i) { return b + gw + GPW * i; };
    auto blocks_of = [&](uint32_t b, int32_t (&blk)[TPL]) {
#pragma unroll
      for (int i = 0; i < TPL; ++i) {
        const uint32_t tok = tok_of(b, i);
        blk[i] = tok < t1 ? bt[bdiv.div(tok)] : 0;
      }
    };
    auto load_rows = [&](const T* cache, uint32_t b, const int32_t (&blk)[TPL], Vec (&v)[TPL]) {
#pragma unroll
      for (int i = 0; i < TPL; ++i) {
        const uint32_t tok = tok_of(b, i);
        if (tok < t1 && active) {
          // Laundered so the compiler recomputes the offset for V instead of
          // keeping the K offsets live across the iteration (register spills).
          int32_t b_i;
          asm volatile("mov.b32 %0, %1;" : "=r"(b_i) : "r"(blk[i]));
          const uint64_t off =
              uint64_t(b_i) * p.block_stride + uint64_t{bdiv.mod(tok)} * row + lane_off;
          v[i] = load_stream(reinterpret_cast<const Vec*>(cache + off));
        } else {
          v[i] = Vec{};
        }
      }
    };
    uint32_t base = t0 + warp * WT;
    int32_t blk[TPL];  // block ids of the iteration whose loads are issued next
    Vec kv[TPL], vv[TPL];
    blocks_of(base, blk);
    load_rows(kc, base, blk, kv);
    load_rows(vc, base, blk, vv);
    blocks_of(base + kStride, blk);
    for (; base < t1; base += kStride) {
      const uint32_t next = base + kStride;

      // Scores: after the reduce-scatter each lane holds my_head's score.
      float s[TPL];
#pragma unroll
      for (int i = 0; i < TPL; ++i) {
        float kf[8];
        C::to_float(kv[i], kf);
        float d[HPC];
#pragma unroll
        for (int h = 0; h < HPC; ++h) {
          float d0 = 0.f, d1 = 0.f;
#pragma unroll
          for (int j = 0; j < 8; j += 2) {
            d0 = fmaf(q[h][j], kf[j], d0);
            d1 = fmaf(q[h][j + 1], kf[j + 1], d1);
          }
          d[h] = d0 + d1;
        }
        int hh;
        const float score = reduce_scatter<LPT, HPC>(d, li, &hh);
        s[i] = tok_of(base, i) < t1 ? score : -INFINITY;
      }
      load_rows(kc, next, blk, kv);  // K of the next iteration

      // Online softmax for my_head over the warp's tokens of this iteration.
      float mx = s[0];
#pragma unroll
      for (int i = 1; i < TPL; ++i) mx = fmaxf(mx, s[i]);
#pragma unroll
      for (int m = LPT; m < 32; m *= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, m));
      const float m_new = fmaxf(m_run, mx);  // finite: token `base` is in range
      const float alpha = exp2f(m_run - m_new);
      m_run = m_new;
      float sum = 0.f;
#pragma unroll
      for (int i = 0; i < TPL; ++i) {
        s[i] = exp2f(s[i] - m_new);  // 0 past the range
        sum += s[i];
      }
      l_run = l_run * alpha + sum;

      // Weighted V: every lane needs every head's weights, from the lanes
      // holding them.
#pragma unroll
      for (int h = 0; h < HPC; ++h) {
        const float a = __shfl_sync(0xffffffffu, alpha, group_base + h * kHeadLanes);
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[h][j] *= a;
      }
#pragma unroll
      for (int i = 0; i < TPL; ++i) {
        float vf[8];
        C::to_float(vv[i], vf);
#pragma unroll
        for (int h = 0; h < HPC; ++h) {
          const float w = __shfl_sync(0xffffffffu, s[i], group_base + h * kHeadLanes);
#pragma unroll
          for (int j = 0; j < 8; ++j) acc[h][j] = fmaf(w, vf[j], acc[h][j]);
        }
      }
      load_rows(vc, next, blk, vv);  // V of the next iteration
      blocks_of(next + kStride, blk);
    }
  } else {
    // Each warp walks its own tokens with its own online softmax: no barrier
    // in the loop, so the SM's warps overlap one another's load latency.
    // Iteration tokens: base + gw + GPW * i; block ids are fetched one
    // iteration ahead.
    constexpr uint32_t kStride = kWarps * WT;
    uint32_t base = t0 + warp * WT;
    int32_t blk[TPL];
#pragma unroll
    for (int i = 0; i < TPL; ++i) {
      const uint32_t tok = base + gw + GPW * i;
      blk[i] = tok < t1 ? bt[bdiv.div(tok)] : 0;
    }
    for (; base < t1; base += kStride) {
      Vec kv[TPL], vv[TPL];
#pragma unroll
      for (int i = 0; i < TPL; ++i) {
        const uint32_t tok = base + gw + GPW * i;
        if (tok < t1 && active) {
          const uint64_t off = uint64_t(blk[i]) * p.block_stride + uint64_t{bdiv.mod(tok)} * row + lane_off;
          kv[i] = load_stream(reinterpret_cast<const Vec*>(kc + off));
          vv[i] = load_stream(reinterpret_cast<const Vec*>(vc + off));
        } else {
          kv[i] = Vec{};
          vv[i] = Vec{};
        }
      }
#pragma unroll
      for (int i = 0; i < TPL; ++i) {
        const uint32_t ntok = base + kStride + gw + GPW * i;
        blk[i] = ntok < t1 ? bt[bdiv.div(ntok)] : 0;
      }

      // Scores: after the reduce-scatter each lane holds my_head's score.
      float s[TPL];
#pragma unroll
      for (int i = 0; i < TPL; ++i) {
        float kf[8];
        C::to_float(kv[i], kf);
        float d[HPC];
#pragma unroll
        for (int h = 0; h < HPC; ++h) {
          float d0 = 0.f, d1 = 0.f;
#pragma unroll
          for (int j = 0; j < 8; j += 2) {
            d0 = fmaf(q[h][j], kf[j], d0);
            d1 = fmaf(q[h][j + 1], kf[j + 1], d1);
          }
          d[h] = d0 + d1;
        }
        int hh;
        const float score = reduce_scatter<LPT, HPC>(d, li, &hh);
        s[i] = base + gw + GPW * i < t1 ? score : -INFINITY;
      }

      // Online softmax for my_head over the warp's tokens of this iteration.
      float mx = s[0];
#pragma unroll
      for (int i = 1; i < TPL; ++i) mx = fmaxf(mx, s[i]);
#pragma unroll
      for (int m = LPT; m < 32; m *= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, m));
      const float m_new = fmaxf(m_run, mx);  // finite: token `base` is in range
      const float alpha = exp2f(m_run - m_new);
      m_run = m_new;
      float sum = 0.f;
#pragma unroll
      for (int i = 0; i < TPL; ++i) {
        s[i] = exp2f(s[i] - m_new);  // 0 past the range
        sum += s[i];
      }
      l_run = l_run * alpha + sum;

      // Weighted V: every lane needs every head's weights, from the lanes
      // holding them.
#pragma unroll
      for (int h = 0; h < HPC; ++h) {
        const float a = __shfl_sync(0xffffffffu, alpha, group_base + h * kHeadLanes);
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[h][j] *= a;
      }
#pragma unroll
      for (int i = 0; i < TPL; ++i) {
        float vf[8];
        C::to_float(vv[i], vf);
#pragma unroll
        for (int h = 0; h < HPC; ++h) {
          const float w = __shfl_sync(0xffffffffu, s[i], group_base + h * kHeadLanes);
#pragma unroll
          for (int j = 0; j < 8; ++j) acc[h][j] = fmaf(w, vf[j], acc[h][j]);
        }
      }
    }
  }

  // The warp's groups share the running max: sum their outputs and sums.
#pragma unroll
  for (int m = LPT; m < 32; m *= 2) {
    l_run += __shfl_xor_sync(0xffffffffu, l_run, m);
#pragma unroll
    for (int h = 0; h < HPC; ++h)
#pragma unroll
      for (int j = 0; j < 8; ++j) acc[h][j] += __shfl_xor_sync(0xffffffffu, acc[h][j], m);
  }
  // Then the warps, each with its own max, through shared memory.
  if (lane < LPT) {
    if (active) {
#pragma unroll
      for (int h = 0; h < HPC; ++h) {
        float4* dst = reinterpret_cast<float4*>(red + (warp * HPC + h) * D + li * 8);
        dst[0] = make_float4(acc[h][0], acc[h][1], acc[h][2], acc[h][3]);
        dst[1] = make_float4(acc[h][4], acc[h][5], acc[h][6], acc[h][7]);
      }
    }
    if (li % kHeadLanes == 0) {
      s_ml[(warp * HPC + my_head) * 2] = m_run;
      s_ml[(warp * HPC + my_head) * 2 + 1] = l_run;
    }
  }
  __syncthreads();
  for (uint32_t idx = threadIdx.x; idx < HPC * D; idx += kThreads) {
    const uint32_t h = idx / D, d = idx % D;
    float m = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) m = fmaxf(m, s_ml[(w * HPC + h) * 2]);
    float sum = 0.f, l = 0.f;
    if (m != -INFINITY) {
#pragma unroll
      for (int w = 0; w < kWarps; ++w) {
        const float f = exp2f(s_ml[(w * HPC + h) * 2] - m);  // 0 for a warp without tokens
        sum += f * red[(w * HPC + h) * D + d];
        l += f * s_ml[(w * HPC + h) * 2 + 1];
      }
    }
    const uint64_t qrow = uint64_t{seq} * p.num_q_heads + head0 + h;
    if (p.num_splits == 0) {
      p.out[qrow * D + d] = __float2bfloat16_rn(l > 0.f ? sum * p.v_scale / l : 0.f);
    } else {
      const uint64_t prow = qrow * p.num_splits + blockIdx.z;
      p.part_acc[prow * D + d] = sum * p.v_scale;
      if (d == 0) {
        p.part_ml[2 * prow] = m;
        p.part_ml[2 * prow + 1] = l;
      }
    }
  }
}

// Chooses the instance for this launch: lanes per token from head_dim,
// heads per CTA from the grid. Launches outside the contract return without
// writing (the op wrapper validates shapes first).
template <typename T>
__device__ __forceinline__ void dispatch(const Params& p) {
  __shared__ __align__(16) float red[kWarps * kMaxHpc * kMaxHeadDim];  // per-warp outputs
  __shared__ float s_ml[kWarps * kMaxHpc * 2];                         // per-warp (max, sum)
  const uint32_t D = p.head_dim;
  if (D == 0 || D % 8 != 0 || D > kMaxHeadDim || p.num_kv_heads == 0 ||
      p.num_q_heads % p.num_kv_heads != 0 || p.num_q_heads % gridDim.x != 0 || p.block_size == 0)
    return;
  const uint32_t hpc = p.num_q_heads / gridDim.x;
  if ((p.num_q_heads / p.num_kv_heads) % hpc != 0) return;
  const int lpt = D <= 64 ? 8 : (D <= 128 ? 16 : 32);
#define SPARKRT_DECODE_CASE(L, H) \
  if (lpt == L && hpc == H) return decode<T, L, H>(p, red, s_ml);
  SPARKRT_DECODE_CASE(8, 1)
  SPARKRT_DECODE_CASE(8, 2)
  SPARKRT_DECODE_CASE(8, 4)
  SPARKRT_DECODE_CASE(16, 1)
  SPARKRT_DECODE_CASE(16, 2)
  SPARKRT_DECODE_CASE(16, 4)
  SPARKRT_DECODE_CASE(32, 1)
  SPARKRT_DECODE_CASE(32, 2)
  SPARKRT_DECODE_CASE(32, 4)
#undef SPARKRT_DECODE_CASE
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

#define SPARKRT_DECODE_BOUNDS __launch_bounds__(kThreads, 2)

// Grid (num_q_heads / hpc, num_seqs), block 256; hpc in {1, 2, 4} divides
// num_q_heads / num_kv_heads.
extern "C" __global__ void SPARKRT_DECODE_BOUNDS paged_decode_attn_bf16(
    const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ k_cache,
    const __nv_bfloat16* __restrict__ v_cache, __nv_bfloat16* __restrict__ out,
    const int32_t* __restrict__ block_tables, const int32_t* __restrict__ seq_lens,
    uint32_t max_blocks_per_seq, uint32_t num_q_heads, uint32_t num_kv_heads, uint32_t head_dim,
    uint32_t block_size, float inv_sqrt_d, uint32_t q_stride, uint32_t sliding_window) {
  Params p = make_params(q, k_cache, v_cache, block_tables, seq_lens, max_blocks_per_seq,
                         num_q_heads, num_kv_heads, head_dim, block_size, q_stride, sliding_window);
  p.out = out;
  p.q_scale = inv_sqrt_d * kLog2e;
  dispatch<__nv_bfloat16>(p);
}

extern "C" __global__ void SPARKRT_DECODE_BOUNDS paged_decode_attn_fp8(
    const __nv_bfloat16* __restrict__ q, const __nv_fp8_storage_t* __restrict__ k_cache,
    const __nv_fp8_storage_t* __restrict__ v_cache, __nv_bfloat16* __restrict__ out,
    const int32_t* __restrict__ block_tables, const int32_t* __restrict__ seq_lens,
    uint32_t max_blocks_per_seq, uint32_t num_q_heads, uint32_t num_kv_heads, uint32_t head_dim,
    uint32_t block_size, float inv_sqrt_d, float k_scale, float v_scale, uint32_t q_stride,
    uint64_t cache_stride, uint32_t sliding_window) {
  Params p = make_params(q, k_cache, v_cache, block_tables, seq_lens, max_blocks_per_seq,
                         num_q_heads, num_kv_heads, head_dim, block_size, q_stride, sliding_window);
  p.out = out;
  p.q_scale = inv_sqrt_d * kLog2e * k_scale;
  p.v_scale = v_scale;
  p.block_stride = cache_stride;
  dispatch<__nv_fp8_storage_t>(p);
}

// Split-KV: grid (num_q_heads / hpc, num_seqs, num_splits). Split z takes
// tokens [t0 + z * per, t0 + (z + 1) * per) of the sequence's range
// [t0, t1), per = ceil((t1 - t0) / num_splits), and writes its unnormalised
// output (times v_scale) and its (max, sum) in base 2 to the workspace.
extern "C" __global__ void SPARKRT_DECODE_BOUNDS paged_decode_attn_bf16_split(
    const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ k_cache,
    const __nv_bfloat16* __restrict__ v_cache, float* __restrict__ part_acc,
    float* __restrict__ part_ml, const int32_t* __restrict__ block_tables,
    const int32_t* __restrict__ seq_lens, uint32_t max_blocks_per_seq, uint32_t num_q_heads,
    uint32_t num_kv_heads, uint32_t head_dim, uint32_t block_size, float inv_sqrt_d,
    uint32_t q_stride, uint32_t sliding_window, uint32_t num_splits) {
  if (num_splits == 0 || blockIdx.z >= num_splits) return;
  Params p = make_params(q, k_cache, v_cache, block_tables, seq_lens, max_blocks_per_seq,
                         num_q_heads, num_kv_heads, head_dim, block_size, q_stride, sliding_window);
  p.part_acc = part_acc;
  p.part_ml = part_ml;
  p.num_splits = num_splits;
  p.q_scale = inv_sqrt_d * kLog2e;
  dispatch<__nv_bfloat16>(p);
}

extern "C" __global__ void SPARKRT_DECODE_BOUNDS paged_decode_attn_fp8_split(
    const __nv_bfloat16* __restrict__ q, const __nv_fp8_storage_t* __restrict__ k_cache,
    const __nv_fp8_storage_t* __restrict__ v_cache, float* __restrict__ part_acc,
    float* __restrict__ part_ml, const int32_t* __restrict__ block_tables,
    const int32_t* __restrict__ seq_lens, uint32_t max_blocks_per_seq, uint32_t num_q_heads,
    uint32_t num_kv_heads, uint32_t head_dim, uint32_t block_size, float inv_sqrt_d,
    float k_scale, float v_scale, uint32_t q_stride, uint64_t cache_stride,
    uint32_t sliding_window, uint32_t num_splits) {
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

// Merges the splits of one (sequence, query head): grid (num_q_heads,
// num_seqs), block 256. out = sum_z 2^(m_z - M) acc_z / sum_z 2^(m_z - M) l_z,
// zeros when every split was empty.
extern "C" __global__ void __launch_bounds__(kThreads) paged_decode_attn_combine(
    const float* __restrict__ part_acc, const float* __restrict__ part_ml,
    __nv_bfloat16* __restrict__ out, uint32_t num_q_heads, uint32_t head_dim,
    uint32_t num_splits) {
  const uint64_t qrow = uint64_t{blockIdx.y} * num_q_heads + blockIdx.x;
  const float* ml = part_ml + qrow * num_splits * 2;
  float m = -INFINITY;
  for (uint32_t z = 0; z < num_splits; ++z)
    if (ml[2 * z + 1] > 0.f) m = fmaxf(m, ml[2 * z]);
  float l = 0.f;
  if (m != -INFINITY)
    for (uint32_t z = 0; z < num_splits; ++z)
      if (ml[2 * z + 1] > 0.f) l += exp2f(ml[2 * z] - m) * ml[2 * z + 1];
  const float* acc = part_acc + qrow * num_splits * head_dim;
  for (uint32_t d = threadIdx.x; d < head_dim; d += blockDim.x) {
    float o = 0.f;
    if (l > 0.f) {
      for (uint32_t z = 0; z < num_splits; ++z)
        if (ml[2 * z + 1] > 0.f) o += exp2f(ml[2 * z] - m) * acc[uint64_t{z} * head_dim + d];
      o /= l;
    }
    out[qrow * head_dim + d] = __float2bfloat16_rn(o);
  }
}
