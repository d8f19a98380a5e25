// mla: the multi-head latent attention (MLA) helpers and paged decode over
// the compressed MLA cache (576 values per token: 512 latent + 64 rope, one
// KV head, V = the latent part) in FP8 E4M3 or NVFP4. Contracts and geometry
// in docs/kernels.md ("Module mla").
//
// Design. These are plain, correct kernels: the copies are one CTA striding
// over its elements; the GEMV gives one output to a warp; decode gives one
// (query head, sequence) to a CTA of 256 threads that walks its tokens in
// chunks: a warp per token computes the score, then every thread updates the
// running max and sum (online softmax, f32) and accumulates the V dims it
// owns.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "sparkrt_kernel_utils.cuh"

namespace {

constexpr uint32_t kThreads = 256;
constexpr uint32_t kWarps = kThreads / 32;
constexpr uint32_t kGemvOutputsPerCta = kWarps;  // one output per warp
constexpr uint32_t kRopeDim = 64;                // the rope part ending each cache row
constexpr uint32_t kMaxDim = 1024;               // q_head_dim and kv_cache_dim
constexpr uint32_t kAccPerThread = kMaxDim / kThreads;
constexpr uint32_t kChunk = 64;  // tokens scored per pass

__device__ __forceinline__ float warp_sum(float v) {
  // Butterflies: every lane ends with the same bits.
#pragma unroll
  for (int m = 16; m >= 1; m /= 2) v += __shfl_xor_sync(0xffffffffu, v, m);
  return v;
}

__device__ __forceinline__ float fp8_value(uint8_t b) {
  return sparkrt_kernels::fp8_to_float_bits(b);
}

// E2M1: sign, 2 exponent bits (bias 1), 1 mantissa bit; no inf or NaN.
__device__ __forceinline__ float e2m1_value(uint32_t nibble) {
  const float mag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float v = mag[nibble & 7u];
  return (nibble & 8u) ? -v : v;
}

// The shapes a decode launch must have; anything else returns without writing.
__device__ __forceinline__ bool decode_shape_ok(uint32_t num_q_heads, uint32_t num_kv_heads,
                                                uint32_t q_head_dim, uint32_t kv_cache_dim,
                                                uint32_t block_size) {
  return blockDim.x == kThreads && gridDim.x == num_q_heads && num_kv_heads != 0 &&
         num_q_heads % num_kv_heads == 0 && block_size != 0 && q_head_dim != 0 &&
         q_head_dim <= kv_cache_dim && kv_cache_dim > kRopeDim && kv_cache_dim <= kMaxDim;
}

// Softmax attention of one query head over `n` virtual tokens. `key(u, d)`
// and `value(u, d)` read token u's dim d as f32; `valid(u)` is false for a
// token the kernel must not read (it gets weight 0). Writes out[0, dv).
template <typename Valid, typename Key, typename Value>
__device__ __forceinline__ void attend(const __nv_bfloat16* __restrict__ q, uint32_t dq,
                                       uint32_t dv, uint32_t n, float inv_sqrt_d,
                                       const float* __restrict__ sinks, uint32_t head,
                                       __nv_bfloat16* __restrict__ out, Valid valid, Key key,
                                       Value value) {
  __shared__ float q_s[kMaxDim];
  __shared__ float p_s[kChunk];
  const uint32_t tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  for (uint32_t d = tid; d < dq; d += kThreads) q_s[d] = __bfloat162float(q[d]);
  __syncthreads();

  float m = -INFINITY, l = 0.0f;
  float acc[kAccPerThread];
#pragma unroll
  for (uint32_t r = 0; r < kAccPerThread; ++r) acc[r] = 0.0f;

  for (uint32_t c = 0; c < n; c += kChunk) {
    const uint32_t cn = n - c < kChunk ? n - c : kChunk;
    for (uint32_t j = warp; j < cn; j += kWarps) {
      const uint32_t u = c + j;
      float score = -INFINITY;
      if (valid(u)) {
        float dot = 0.0f;
        for (uint32_t d = lane; d < dq; d += 32) dot += q_s[d] * key(u, d);
        score = warp_sum(dot) * inv_sqrt_d;
      }
      if (lane == 0) p_s[j] = score;
    }
    __syncthreads();
    float cm = -INFINITY;
    for (uint32_t j = 0; j < cn; ++j) cm = fmaxf(cm, p_s[j]);
    const float m_new = fmaxf(m, cm);
    const float rescale = m == -INFINITY ? 0.0f : expf(m - m_new);
    __syncthreads();  // everyone has read the scores
    if (tid < cn) p_s[tid] = p_s[tid] == -INFINITY ? 0.0f : expf(p_s[tid] - m_new);
    __syncthreads();
    l *= rescale;
#pragma unroll
    for (uint32_t r = 0; r < kAccPerThread; ++r) acc[r] *= rescale;
    for (uint32_t j = 0; j < cn; ++j) {
      const float p = p_s[j];
      l += p;
      if (p == 0.0f) continue;
#pragma unroll
      for (uint32_t r = 0; r < kAccPerThread; ++r) {
        const uint32_t d = tid + r * kThreads;
        if (d < dv) acc[r] += p * value(c + j, d);
      }
    }
    m = m_new;
    __syncthreads();  // p_s is rewritten by the next chunk
  }
  if (sinks != nullptr) {
    // The sink is one more logit in the denominator that carries no value.
    const float sink = sinks[head];
    const float m_new = fmaxf(m, sink);
    const float rescale = m == -INFINITY ? 0.0f : expf(m - m_new);
    l = l * rescale + expf(sink - m_new);
#pragma unroll
    for (uint32_t r = 0; r < kAccPerThread; ++r) acc[r] *= rescale;
  }
#pragma unroll
  for (uint32_t r = 0; r < kAccPerThread; ++r) {
    const uint32_t d = tid + r * kThreads;
    if (d < dv) out[d] = __float2bfloat16_rn(l > 0.0f ? acc[r] / l : 0.0f);
  }
}

// What one decode CTA serves: query head blockIdx.x of sequence blockIdx.y,
// its KV head, and the window [t0, len) of its block-table row (len clamped
// to the table's capacity).
struct DecodeCta {
  uint32_t head, seq, kvh, t0, len;
  const int32_t* table;
  uint64_t row;  // values per token, every KV head

  __device__ DecodeCta(const int32_t* block_tables, const int32_t* seq_lens,
                       uint32_t max_blocks_per_seq, uint32_t num_q_heads, uint32_t num_kv_heads,
                       uint32_t kv_cache_dim, uint32_t block_size, uint32_t sliding_window)
      : head(blockIdx.x),
        seq(blockIdx.y),
        kvh(blockIdx.x / (num_q_heads / num_kv_heads)),
        table(block_tables + uint64_t{blockIdx.y} * max_blocks_per_seq),
        row(uint64_t{num_kv_heads} * kv_cache_dim) {
    const int32_t sl = seq_lens[seq];
    const uint64_t cap = uint64_t{max_blocks_per_seq} * block_size;
    len = sl <= 0 ? 0u : uint32_t(uint64_t(sl) < cap ? uint64_t(sl) : cap);
    t0 = sliding_window > 0 && len > sliding_window ? len - sliding_window : 0u;
  }
  // Where token t's row of this CTA's KV head starts within its block, in values.
  __device__ uint64_t index_in_block(uint32_t t, uint32_t kv_cache_dim, uint32_t block_size) const {
    return uint64_t{t % block_size} * row + uint64_t{kvh} * kv_cache_dim;
  }
  __device__ const __nv_bfloat16* q_row(const __nv_bfloat16* q, uint32_t num_q_heads,
                                        uint32_t q_head_dim) const {
    return q + (uint64_t{seq} * num_q_heads + head) * q_head_dim;
  }
  __device__ __nv_bfloat16* o_row(__nv_bfloat16* o, uint32_t num_q_heads, uint32_t dv) const {
    return o + (uint64_t{seq} * num_q_heads + head) * dv;
  }
};

}  // namespace

// output[h * output_stride + n] = sum_k weight[h][n][k] * input[h * input_stride + k]
// (bf16 in, f32 accumulation, bf16 out). Grid (ceil(n_out / 8), num_heads),
// block 256: warp w of CTA x computes output n = 8x + w of head blockIdx.y.
extern "C" __global__ void __launch_bounds__(kThreads)
    mla_batched_gemv(const __nv_bfloat16* __restrict__ input,
                     const __nv_bfloat16* __restrict__ weight, __nv_bfloat16* __restrict__ output,
                     uint32_t n_out, uint32_t k, uint32_t input_stride, uint32_t output_stride) {
  const uint32_t lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const uint32_t head = blockIdx.y;
  const uint32_t n = blockIdx.x * kGemvOutputsPerCta + warp;
  if (n >= n_out) return;
  const __nv_bfloat16* x = input + uint64_t{head} * input_stride;
  const __nv_bfloat16* w = weight + (uint64_t{head} * n_out + n) * k;
  float dot = 0.0f;
  for (uint32_t i = lane; i < k; i += 32) dot += __bfloat162float(w[i]) * __bfloat162float(x[i]);
  dot = warp_sum(dot);
  if (lane == 0) output[uint64_t{head} * output_stride + n] = __float2bfloat16_rn(dot);
}

// For h < nq, i < rope: x = q_full[h * hd + nope + i];
// q_absorbed_buf[h * mla_cache_dim + kv_lora + i] = x; q_rope_contiguous[h * rope + i] = x.
// Grid (1), block 256.
extern "C" __global__ void __launch_bounds__(kThreads)
    mla_q_rope_scatter(const __nv_bfloat16* __restrict__ q_full,
                       __nv_bfloat16* __restrict__ q_absorbed_buf,
                       __nv_bfloat16* __restrict__ q_rope_contiguous, uint32_t nq, uint32_t hd,
                       uint32_t nope, uint32_t rope, uint32_t kv_lora, uint32_t mla_cache_dim) {
  const uint32_t total = nq * rope;
  for (uint32_t e = threadIdx.x; e < total; e += blockDim.x) {
    const uint32_t h = e / rope, i = e % rope;
    const __nv_bfloat16 x = q_full[uint64_t{h} * hd + nope + i];
    q_absorbed_buf[uint64_t{h} * mla_cache_dim + kv_lora + i] = x;
    q_rope_contiguous[e] = x;
  }
}

// For h < nq, i < rope: q_absorbed_buf[h * mla_cache_dim + kv_lora + i] =
// q_rope_direct[h * rope + i]. Grid (1), block 256.
extern "C" __global__ void __launch_bounds__(kThreads)
    mla_q_rope_writeback(const __nv_bfloat16* __restrict__ q_rope_direct,
                         __nv_bfloat16* __restrict__ q_absorbed_buf, uint32_t nq, uint32_t rope,
                         uint32_t kv_lora, uint32_t mla_cache_dim) {
  const uint32_t total = nq * rope;
  for (uint32_t e = threadIdx.x; e < total; e += blockDim.x) {
    const uint32_t h = e / rope, i = e % rope;
    q_absorbed_buf[uint64_t{h} * mla_cache_dim + kv_lora + i] = q_rope_direct[e];
  }
}

// One token's cache rows: k_cache[0, mla_cache_dim) = [kv_latent | k_rope | 0...],
// v_cache[0, mla_cache_dim) = [kv_latent | 0...]. Grid (1), block
// max(mla_cache_dim, 256).
extern "C" __global__ void mla_cache_assemble(const __nv_bfloat16* __restrict__ kv_latent,
                                              const __nv_bfloat16* __restrict__ k_rope,
                                              __nv_bfloat16* __restrict__ k_cache,
                                              __nv_bfloat16* __restrict__ v_cache, uint32_t kv_lora,
                                              uint32_t rope, uint32_t mla_cache_dim) {
  const __nv_bfloat16 zero = __float2bfloat16_rn(0.0f);
  for (uint32_t d = threadIdx.x; d < mla_cache_dim; d += blockDim.x) {
    const bool latent = d < kv_lora;
    const __nv_bfloat16 lat = latent ? kv_latent[d] : zero;
    k_cache[d] = latent ? lat : (d - kv_lora < rope ? k_rope[d - kv_lora] : zero);
    v_cache[d] = lat;
  }
}

// Decode over an NVFP4 cache: a block is block_stride_bytes long, its first
// data_section_bytes hold the E2M1 values two to a byte (even index in the
// low nibble), then one E4M3 scale per 16 consecutive values. Grid
// (num_q_heads, num_seqs), block 256.
extern "C" __global__ void __launch_bounds__(kThreads)
    mla_paged_decode_nvfp4(const __nv_bfloat16* __restrict__ q, const uint8_t* __restrict__ k_cache,
                           const uint8_t* __restrict__ v_cache, __nv_bfloat16* __restrict__ o,
                           const int32_t* __restrict__ block_tables,
                           const int32_t* __restrict__ seq_lens, uint32_t max_blocks_per_seq,
                           uint32_t num_q_heads, uint32_t num_kv_heads, uint32_t q_head_dim,
                           uint32_t kv_cache_dim, uint32_t block_size, float inv_sqrt_d,
                           uint64_t block_stride_bytes, uint64_t data_section_bytes) {
  if (!decode_shape_ok(num_q_heads, num_kv_heads, q_head_dim, kv_cache_dim, block_size) ||
      kv_cache_dim % 16 != 0)
    return;
  const DecodeCta cta(block_tables, seq_lens, max_blocks_per_seq, num_q_heads, num_kv_heads,
                      kv_cache_dim, block_size, 0);
  const uint32_t dv = kv_cache_dim - kRopeDim;
  auto block_of = [&](uint32_t u) { return cta.table[(cta.t0 + u) / block_size]; };
  auto read = [&](const uint8_t* cache, uint32_t u, uint32_t d) {
    const uint8_t* base = cache + uint64_t(block_of(u)) * block_stride_bytes;
    const uint64_t i = cta.index_in_block(cta.t0 + u, kv_cache_dim, block_size) + d;
    const uint32_t byte = base[i / 2];
    const float scale = fp8_value(base[data_section_bytes + i / 16]);
    return e2m1_value(i % 2 ? byte >> 4 : byte & 0xfu) * scale;
  };
  attend(
      cta.q_row(q, num_q_heads, q_head_dim), q_head_dim, dv, cta.len - cta.t0, inv_sqrt_d, nullptr,
      cta.head, cta.o_row(o, num_q_heads, dv), [&](uint32_t u) { return block_of(u) >= 0; },
      [&](uint32_t u, uint32_t d) { return read(k_cache, u, d); },
      [&](uint32_t u, uint32_t d) { return read(v_cache, u, d); });
}

// Decode over an FP8 E4M3 cache (K = fp8 * k_scale, V = fp8 * v_scale,
// cache_stride bytes per block), with a sliding window, optional per-head
// sinks and an optional compressed pool of comp_block_count FP8 rows per
// sequence attended in addition. Grid (num_q_heads, num_seqs), block 256.
extern "C" __global__ void __launch_bounds__(kThreads)
    mla_paged_decode_fp8(const __nv_bfloat16* __restrict__ q, const uint8_t* __restrict__ k_cache,
                         const uint8_t* __restrict__ v_cache, __nv_bfloat16* __restrict__ o,
                         const int32_t* __restrict__ block_tables,
                         const int32_t* __restrict__ seq_lens, uint32_t max_blocks_per_seq,
                         uint32_t num_q_heads, uint32_t num_kv_heads, uint32_t q_head_dim,
                         uint32_t kv_cache_dim, uint32_t block_size, float inv_sqrt_d,
                         float k_scale, float v_scale, uint64_t cache_stride,
                         uint32_t sliding_window, const float* __restrict__ sinks,
                         const uint8_t* __restrict__ comp_pool, uint32_t comp_block_count) {
  if (!decode_shape_ok(num_q_heads, num_kv_heads, q_head_dim, kv_cache_dim, block_size)) return;
  const DecodeCta cta(block_tables, seq_lens, max_blocks_per_seq, num_q_heads, num_kv_heads,
                      kv_cache_dim, block_size, sliding_window);
  const uint32_t dv = kv_cache_dim - kRopeDim;
  // Virtual tokens: the sequence's compressed rows first, then its window.
  const uint32_t n_comp = comp_pool != nullptr ? comp_block_count : 0u;
  const uint8_t* comp =
      comp_pool + uint64_t{cta.seq} * n_comp * cta.row + uint64_t{cta.kvh} * kv_cache_dim;
  auto block_of = [&](uint32_t u) { return cta.table[(cta.t0 + u - n_comp) / block_size]; };
  auto read = [&](const uint8_t* cache, uint32_t u, uint32_t d) {
    if (u < n_comp) return fp8_value(comp[uint64_t{u} * cta.row + d]);
    const uint64_t i = cta.index_in_block(cta.t0 + u - n_comp, kv_cache_dim, block_size) + d;
    return fp8_value(cache[uint64_t(block_of(u)) * cache_stride + i]);
  };
  attend(
      cta.q_row(q, num_q_heads, q_head_dim), q_head_dim, dv, n_comp + (cta.len - cta.t0),
      inv_sqrt_d, sinks, cta.head, cta.o_row(o, num_q_heads, dv),
      [&](uint32_t u) { return u < n_comp || block_of(u) >= 0; },
      [&](uint32_t u, uint32_t d) { return read(k_cache, u, d) * k_scale; },
      [&](uint32_t u, uint32_t d) { return read(v_cache, u, d) * v_scale; });
}
