// paged_attention: decode attention (one query token per sequence) over a
// paged KV cache in bf16 or fp8 E4M3. Contracts and geometry in
// docs/kernels.md ("Module paged_attention").
//
// Design. Decode attention reads each K and V row once and does a few flops
// per byte, so it is bound by memory bandwidth. A CTA of 256 threads serves
// `hpc` query heads (1, 2 or 4) that share one KV head, so K/V are read once
// for all of them. A token row (head_dim elements) is read by a group of
// head_dim/8 lanes, 8 elements each (16-byte loads for bf16, 8-byte for fp8).
// The CTA walks its token range in chunks:
//   1. each lane group loads K for its tokens of the chunk and computes the
//      hpc dot products (a reduce-scatter over the group's lanes), scores go
//      to shared memory; V of the chunk is prefetched into L2 meanwhile;
//   2. one warp per head updates the running max and sum (online softmax,
//      base 2: q is pre-scaled by inv_sqrt_d * log2(e)) and turns the
//      chunk's scores into weights;
//   3. each lane group loads V for the same tokens and accumulates
//      weight * V for its 8 dims of every head; K of the next chunk is
//      prefetched into L2.
// At the end the groups' partial outputs are summed through shared memory.
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
constexpr int kMaxChunk = 256;  // tokens per chunk: (kThreads / lanes per token) * tokens per lane
constexpr float kLog2e = 1.4426950408889634f;

// Per cache dtype: the load of one lane's 8 elements and its conversion.
template <typename T>
struct Cache;
template <>
struct Cache<__nv_bfloat16> {
  using Vec = uint4;                      // 8 x bf16
  static constexpr int kTokensPerLane = 4;  // 64 bytes of K in flight per lane
  static __device__ __forceinline__ void to_float(const Vec& v, float (&f)[8]) {
    bf16x8_to_float(v, f);
  }
};
template <>
struct Cache<__nv_fp8_storage_t> {
  using Vec = uint2;                      // 8 x e4m3
  static constexpr int kTokensPerLane = 8;  // the same bytes in flight as bf16
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
__device__ __forceinline__ void decode(const Params& p, unsigned char* smem, float* small,
                                       int32_t* s_blocks) {
  using C = Cache<T>;
  using Vec = typename C::Vec;
  constexpr int TPL = C::kTokensPerLane;
  constexpr int NG = kThreads / LPT;  // lane groups per CTA
  constexpr int CH = NG * TPL;        // tokens per chunk
  static_assert(CH <= kMaxChunk && HPC <= kMaxHpc && LPT >= HPC, "chunk layout");

  float* sc = reinterpret_cast<float*>(smem);          // [HPC][CH] scores, then weights
  float* red = reinterpret_cast<float*>(smem);         // epilogue: [kWarps][HPC][D], aliases sc
  float* s_alpha = small;                              // [HPC] rescale of this chunk
  float* s_ml = small + kMaxHpc;                       // [HPC][2] final max and sum

  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int li = tid % LPT;  // lane within the group
  const int g = tid / LPT;   // group within the CTA
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
  float m_run = -INFINITY, l_run = 0.f;  // kept by warp h for head h

  const T* kc = static_cast<const T*>(p.k_cache);
  const T* vc = static_cast<const T*>(p.v_cache);
  const int32_t* bt = p.block_tables + uint64_t{seq} * p.max_blocks_per_seq;
  const uint64_t row = uint64_t{p.num_kv_heads} * D;
  const uint64_t lane_off = uint64_t{kvh} * D + li * 8;
  auto offset_of = [&](uint32_t tok, int32_t block) -> uint64_t {
    return uint64_t(block) * p.block_stride + uint64_t{bdiv.mod(tok)} * row + lane_off;
  };

  // Block ids of a chunk's tokens live in shared memory, double-buffered:
  // s_blocks[b][k] is the block of the chunk's k-th distinct block index.
  // The next chunk's ids are loaded while this one computes.
  auto load_blocks = [&](uint32_t c, int32_t* dst) {
    if (c >= t1) return;
    const uint32_t first = bdiv.div(c);
    const uint32_t last = bdiv.div((c + CH < t1 ? c + CH : t1) - 1);
    for (uint32_t k = tid; k <= last - first; k += kThreads) dst[k] = bt[first + k];
  };
  auto block_of = [&](uint32_t tok, uint32_t c, const int32_t* blocks) {
    return blocks[bdiv.div(tok) - bdiv.div(c)];
  };
  load_blocks(t0, s_blocks);
  __syncthreads();
  int buf = 0;

  for (uint32_t c0 = t0; c0 < t1; c0 += CH) {
    // 1. K loads, V prefetch, next block ids.
    const int32_t* blocks = s_blocks + buf * kMaxChunk;
    int32_t* next_blocks = s_blocks + (buf ^ 1) * kMaxChunk;
    Vec kv[TPL];
#pragma unroll
    for (int i = 0; i < TPL; ++i) {
      const uint32_t tok = c0 + g + NG * i;
      if (tok < t1 && active) {
        const uint64_t off = offset_of(tok, block_of(tok, c0, blocks));
        kv[i] = load_stream(reinterpret_cast<const Vec*>(kc + off));
        prefetch_l2(vc + off);
      } else {
        kv[i] = Vec{};
      }
    }
    load_blocks(c0 + CH, next_blocks);
#pragma unroll
    for (int i = 0; i < TPL; ++i) {
      float kf[8];
      C::to_float(kv[i], kf);
      float s[HPC];
#pragma unroll
      for (int h = 0; h < HPC; ++h) {
        float d0 = 0.f, d1 = 0.f;
#pragma unroll
        for (int j = 0; j < 8; j += 2) {
          d0 = fmaf(q[h][j], kf[j], d0);
          d1 = fmaf(q[h][j + 1], kf[j + 1], d1);
        }
        s[h] = d0 + d1;
      }
      int hh;
      const float score = reduce_scatter<LPT, HPC>(s, li, &hh);
      if ((li & (LPT / HPC - 1)) == 0) {
        const uint32_t tok = c0 + g + NG * i;
        sc[hh * CH + g + NG * i] = tok < t1 ? score : -INFINITY;
      }
    }
    __syncthreads();

    // 2. Online softmax update, one warp per head.
    if (warp < HPC) {
      float* row_s = sc + warp * CH;
      float cmax = -INFINITY;
      for (int j = lane; j < CH; j += 32) cmax = fmaxf(cmax, row_s[j]);
#pragma unroll
      for (int m = 16; m > 0; m /= 2) cmax = fmaxf(cmax, __shfl_xor_sync(0xffffffffu, cmax, m));
      const float m_new = fmaxf(m_run, cmax);  // finite: the chunk holds a valid token
      const float alpha = exp2f(m_run - m_new);
      float sum = 0.f;
      for (int j = lane; j < CH; j += 32) {
        const float e = exp2f(row_s[j] - m_new);
        row_s[j] = e;
        sum += e;
      }
#pragma unroll
      for (int m = 16; m > 0; m /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, m);
      l_run = l_run * alpha + sum;
      m_run = m_new;
      if (lane == 0) s_alpha[warp] = alpha;
    }
    __syncthreads();

    // 3. Weighted V; K of the next chunk goes to L2 meanwhile.
#pragma unroll
    for (int h = 0; h < HPC; ++h) {
      const float a = s_alpha[h];
#pragma unroll
      for (int j = 0; j < 8; ++j) acc[h][j] *= a;
    }
    Vec vv[TPL];
#pragma unroll
    for (int i = 0; i < TPL; ++i) {
      const uint32_t tok = c0 + g + NG * i;
      vv[i] = (tok < t1 && active) ? load_stream(reinterpret_cast<const Vec*>(
                                         vc + offset_of(tok, block_of(tok, c0, blocks))))
                                   : Vec{};
    }
#pragma unroll
    for (int i = 0; i < TPL; ++i) {
      const uint32_t ntok = c0 + CH + g + NG * i;
      if (ntok < t1 && active)
        prefetch_l2(kc + offset_of(ntok, block_of(ntok, c0 + CH, next_blocks)));
    }
#pragma unroll
    for (int i = 0; i < TPL; ++i) {
      float vf[8];
      C::to_float(vv[i], vf);
#pragma unroll
      for (int h = 0; h < HPC; ++h) {
        const float w = sc[h * CH + g + NG * i];  // 0 for tokens past the range
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[h][j] = fmaf(w, vf[j], acc[h][j]);
      }
    }
    buf ^= 1;
    __syncthreads();
  }

  // Sum the groups: inside each warp by shuffles, then across warps.
#pragma unroll
  for (int m = LPT; m < 32; m *= 2)
#pragma unroll
    for (int h = 0; h < HPC; ++h)
#pragma unroll
      for (int j = 0; j < 8; ++j) acc[h][j] += __shfl_xor_sync(0xffffffffu, acc[h][j], m);
  if (warp < HPC && lane == 0) {
    s_ml[2 * warp] = m_run;
    s_ml[2 * warp + 1] = l_run;
  }
  if (lane < LPT && active) {
#pragma unroll
    for (int h = 0; h < HPC; ++h) {
      float4* dst = reinterpret_cast<float4*>(red + (warp * HPC + h) * D + li * 8);
      dst[0] = make_float4(acc[h][0], acc[h][1], acc[h][2], acc[h][3]);
      dst[1] = make_float4(acc[h][4], acc[h][5], acc[h][6], acc[h][7]);
    }
  }
  __syncthreads();
  for (uint32_t idx = tid; idx < HPC * D; idx += kThreads) {
    const uint32_t h = idx / D, d = idx % D;
    float sum = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) sum += red[(w * HPC + h) * D + d];
    const uint64_t qrow = uint64_t{seq} * p.num_q_heads + head0 + h;
    const float l = s_ml[2 * h + 1];
    if (p.num_splits == 0) {
      p.out[qrow * D + d] = __float2bfloat16_rn(l > 0.f ? sum * p.v_scale / l : 0.f);
    } else {
      const uint64_t prow = qrow * p.num_splits + blockIdx.z;
      p.part_acc[prow * D + d] = sum * p.v_scale;
      if (d == 0) {
        p.part_ml[2 * prow] = s_ml[2 * h];
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
  __shared__ __align__(16) unsigned char smem[kWarps * kMaxHpc * kMaxHeadDim * sizeof(float)];
  __shared__ float small[3 * kMaxHpc];
  __shared__ int32_t s_blocks[2 * kMaxChunk];
  static_assert(sizeof(smem) >= kMaxHpc * kMaxChunk * sizeof(float), "smem");
  const uint32_t D = p.head_dim;
  if (D == 0 || D % 8 != 0 || D > kMaxHeadDim || p.num_kv_heads == 0 ||
      p.num_q_heads % p.num_kv_heads != 0 || p.num_q_heads % gridDim.x != 0 || p.block_size == 0)
    return;
  const uint32_t hpc = p.num_q_heads / gridDim.x;
  if ((p.num_q_heads / p.num_kv_heads) % hpc != 0) return;
  const int lpt = D <= 64 ? 8 : (D <= 128 ? 16 : 32);
#define SPARKRT_DECODE_CASE(L, H) \
  if (lpt == L && hpc == H) return decode<T, L, H>(p, smem, small, s_blocks);
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
