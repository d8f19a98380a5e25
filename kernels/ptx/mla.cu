// mla: the multi-head latent attention (MLA) helpers and paged decode over
// the compressed MLA cache (576 values per token: 512 latent + 64 rope, one
// KV head, V = the latent part) in FP8 E4M3 or NVFP4. Contracts and geometry
// in docs/kernels.md ("Module mla").
//
// Design. The copies are one CTA striding over its elements; the GEMV gives
// one output to a warp. Decode of the MLA row, FP8 or NVFP4, runs the tiled
// tensor-core kernel below ("Tiled decode"). Every other decode shape gives
// one (query head, sequence) to a CTA of 256 threads that walks its tokens
// in chunks: a warp per token computes the score, then every thread updates
// the running max and sum (online softmax, f32) and accumulates the V dims
// it owns (correct, not fast).
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "sparkrt/contract/mla.h"
#include "sparkrt_kernel_utils.cuh"

namespace {

namespace contract = sparkrt::contract::mla;
constexpr uint32_t kThreads = contract::kThreads;
constexpr uint32_t kWarps = kThreads / 32;
constexpr uint32_t kGemvOutputsPerCta = contract::kGemvOutputsPerCta;  // one output per warp
constexpr uint32_t kRopeDim = contract::kRopeDim;
constexpr uint32_t kMaxDim = contract::kMaxDim;  // q_head_dim and kv_cache_dim
constexpr uint32_t kAccPerThread = kMaxDim / kThreads;
constexpr uint32_t kChunk = contract::kPerHeadChunk;  // tokens scored per pass
constexpr uint32_t kMaxSplits = contract::kCombineMaxSplits;  // one weight per thread
static_assert(kGemvOutputsPerCta == kWarps, "mla_batched_gemv: one output per warp");

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
// Built from bits (a table would live in local memory): 0 and 0.5 for
// magnitude codes 0 and 1, else exponent (code >> 1) - 1, mantissa code & 1.
__device__ __forceinline__ float e2m1_value(uint32_t nibble) {
  const uint32_t mag = nibble & 7u;
  const uint32_t bits = mag < 2u ? mag * 0x3f000000u : (mag + 252u) << 22;
  return __uint_as_float(bits | (nibble & 8u) << 28);
}

// The shapes a decode launch must have; anything else returns without writing.
__device__ __forceinline__ bool decode_shape_ok(uint32_t num_q_heads, uint32_t num_kv_heads,
                                                uint32_t q_head_dim, uint32_t kv_cache_dim,
                                                uint32_t block_size) {
  return blockDim.x == kThreads && gridDim.x == num_q_heads && num_kv_heads != 0 &&
         num_q_heads % num_kv_heads == 0 && block_size != 0 && q_head_dim != 0 &&
         q_head_dim <= kv_cache_dim && kv_cache_dim > kRopeDim && kv_cache_dim <= kMaxDim;
}

// The per-head decode's shared memory: q as f32 and one chunk's scores.
struct AttendScratch {
  float q[kMaxDim];
  float p[kChunk];
};

// ops/src/mla.cc passes this much to mla_paged_decode_fp8's per-head launch.
static_assert(sizeof(AttendScratch) == contract::kPerHeadSharedBytes, "the contract's layout");

// Softmax attention of one query head over `n` virtual tokens. `key(u, d)`
// and `value(u, d)` read token u's dim d as f32; `valid(u)` is false for a
// token the kernel must not read (it gets weight 0). Writes out[0, dv).
template <typename Valid, typename Key, typename Value>
__device__ __forceinline__ void attend(AttendScratch& scratch, const __nv_bfloat16* __restrict__ q,
                                       uint32_t dq, uint32_t dv, uint32_t n, float inv_sqrt_d,
                                       const float* __restrict__ sinks, uint32_t head,
                                       __nv_bfloat16* __restrict__ out, Valid valid, Key key,
                                       Value value) {
  float* const q_s = scratch.q;
  float* const p_s = scratch.p;
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

// ── Tiled decode (FP8 and NVFP4) ────────────────────────────────────────────
//
// The tiled kernel (the geometry the op launches for the MLA row, 576 values;
// docs/kernels.md, "Tiled decode"), one template for both cache formats. A
// CTA serves up to 16 query heads of one KV head (the 16 rows of the mma
// tiles) of one sequence over one split of its tokens, in tiles of 64
// tokens. Two warps do nothing but stage the tiles into dynamic shared
// memory with cp.async, up to three ahead; they and the 8 consumer warps
// hand each stage over through two mbarriers, so neither the copies nor
// their block-table reads sit on the consumers' path.
// The consumers form two teams of 4 warps that take alternate tiles, each
// with its own softmax state and accumulators: one team's barriers and
// softmax overlap the other's products, and the two merge at the end. (One
// staging warp could not issue the copies of a tile as fast as 8 consumer
// warps used it, and with one team the consumers spent most of a tile in
// dependent latency; each change alone measured within 2%, both 1.12x.)
// Where two teams do not fit (99 KB parts) one team of 8 warps takes every
// tile. A team syncs twice a tile. Per tile, for a team of W warps:
//   scores  S[16][64] = q K^T on the tensor cores (f16 in, f32 accumulate):
//           warp w of the team takes 64 * 4 / W tokens and a quarter (w % 4)
//           of the dims; the quarters meet in shared memory;
//   softmax 2W threads a row: base-2 online softmax, P to shared memory (f16);
//   output  O[16][512] += P V on the tensor cores: warp w owns the 32-dim
//           (NVFP4: 64-dim) output groups w, w + W, ...
// The fp8 bytes become f16 (exact) as the operand registers are built. q is
// scaled per head by a power of two into f16's range (exact for a bf16 row
// whose values span less than 2^29) and the scale is undone on the score.
// Both products reduce over an order of their choosing: a lane's four k
// values are four consecutive staged fp8 bytes, so one 32-bit shared load
// (and, for V, a byte permute) builds two operand registers. Everything but the
// query width is fixed at compile time, so shared-memory addresses are a
// few per-thread bases plus immediates.
//
// NVFP4 stages each token's 288 data bytes with 16-byte copies (a row is
// 16-byte aligned in any block layout the tiled op takes) and its 36 scale
// bytes with 4-byte copies (a row's scales are only 4-byte aligned). Each
// E2M1 code becomes an E4M3 byte of value e2m1 * 2^-6 by bit moves, the
// byte an f16 as for fp8, and the f16 pair is multiplied by the group's
// scale (exact: at most 2 + 4 significant bits, magnitudes 2^-16 .. 42);
// the 2^6 (kE2m1Unit) is undone with k_scale and v_scale. A lane's operands follow the
// scale groups: for the scores, 8 bytes (16 values, one scale) of a token
// make its four k-steps; for the output, 4 bytes (8 dims) of each of four
// tokens make 8 n-tiles' operands (one scale per token).
namespace tiled {

using sparkrt_kernels::cp_async16;
using sparkrt_kernels::dynamic_smem_bytes;
using sparkrt_kernels::pack_bf16;
using sparkrt_kernels::pack_f16;

constexpr uint32_t kTile = contract::kTile;                  // tokens per stage
constexpr uint32_t kRows = contract::kTiledRows;             // query heads per CTA
constexpr uint32_t kStagingWarps = contract::kStagingWarps;  // warps that only stage
constexpr uint32_t kStagingThreads = contract::kTiledThreads;  // + 8 consumer warps
constexpr uint32_t kDim = contract::kCacheDim;               // kv_cache_dim
constexpr uint32_t kDv = kDim - kRopeDim;                    // V and output dims
constexpr uint32_t kQuarters = contract::kQuarters;  // score dims split over warps w % 4
constexpr uint32_t kKsteps = kDim / 16 / kQuarters;  // k-steps of a quarter
// Staged rows are padded by one 16-byte chunk: the 8 rows of a score
// fragment then start on 8 distinct bank groups (37 chunks a row). The V
// fragment reads (4 rows 4 apart, two chunks each) meet in pairs.
constexpr uint32_t kPitchK = contract::kPitchK;      // staged K row
constexpr uint32_t kPitchV = contract::kPitchV;      // staged V row when V is a separate pool
constexpr uint32_t kRedPitch = contract::kRedPitch;  // floats: conflict-free float2 writes
constexpr uint32_t kPPitch = contract::kPPitch;      // halves: conflict-free 8-byte reads
constexpr float kLog2e = 1.4426950408889634f;

// The cache formats the kernel is instantiated for.
enum class Format { kFp8, kNvfp4 };

// NVFP4 stages (sparkrt/contract/mla.h): a token's data row (288 bytes of K,
// 256 of a separate V) at r * length + kNvfp4RowSkew * (r / 4), its scale
// bytes at r * kNvScalePitch. Rows 288 bytes apart start 32 bytes apart
// modulo 128 (256 bytes apart: 0); with the skew, the 4 rows that one phase
// of a score fragment's 8-byte loads reads (rows 8i + g, g < 4 or g >= 4)
// and the 4 rows of an output fragment's load (rows 4t + r) start 32 bytes
// apart modulo 128: no bank conflicts.
constexpr uint32_t kNvRow = contract::kNvfp4RowBytes;
constexpr uint32_t kNvVRow = contract::kNvfp4VRowBytes;
constexpr uint32_t kNvScalePitch = contract::kNvfp4ScalePitch;
constexpr uint32_t kNvGroups = kDim / 16;  // scale groups of a K row (36)
constexpr uint32_t kNvQuarterGroups = kNvGroups / kQuarters;  // 9
static_assert(kNvQuarterGroups == 9, "a quarter: two blocks of 4 groups and one more");
__device__ __forceinline__ uint32_t nv_row_at(uint32_t r, uint32_t row_bytes) {
  return r * row_bytes + contract::kNvfp4RowSkew * (r >> 2);
}
// K row r + 8 is this much further than row r (n-tile i + 1 of the scores).
constexpr uint32_t kNvRows8 = 8 * kNvRow + 2 * contract::kNvfp4RowSkew;
// Offsets inside an NVFP4 stage, after the K rows.
__device__ __forceinline__ uint32_t nv_k_scales_at(bool shared_v) {
  return contract::nvfp4_rows_bytes(kNvRow) + (shared_v ? 0u : contract::nvfp4_rows_bytes(kNvVRow));
}
__device__ __forceinline__ uint32_t nv_v_scales_at(bool shared_v) {
  return shared_v ? nv_k_scales_at(true) : nv_k_scales_at(false) + kTile * kNvScalePitch;
}

// What one team of consumer warps keeps in shared memory.
struct TeamState {
  float red[kQuarters][kRows][kRedPitch];  // score partials per dim quarter
  uint16_t p[kRows][kPPitch];              // probabilities, f16 bits
  float alpha[kRows];                      // this tile's rescale of O
  float row_m[kRows], row_l[kRows];        // final running max (base 2) and sum
};
template <uint32_t kTeams>
struct Fixed {
  TeamState team[kTeams];
  float q_scale[kRows];  // 2^e of each head's q
};
// The host sizes the launch's shared memory with the contract's layout.
static_assert(sizeof(TeamState) == contract::kTeamBytes &&
                  sizeof(Fixed<2>) == contract::tiled_fixed_bytes(2),
              "the contract's layout");
// A stage: the tile's rows, then 64 token flags, its `full` and `empty`
// mbarriers and (stage 0) the teams' two hand-over mbarriers.
static_assert(contract::kFlagBytes == kTile + 4 * sizeof(uint64_t), "flags and four mbarriers");
template <Format kFmt>
__device__ __forceinline__ uint32_t stage_bytes(bool shared_v) {
  if constexpr (kFmt == Format::kFp8) return contract::tiled_stage_bytes(!shared_v);
  return contract::tiled_nvfp4_stage_bytes(!shared_v);
}
// Where a stage's token flags (then its mbarriers) start.
template <Format kFmt>
__device__ __forceinline__ uint32_t flags_offset(bool shared_v) {
  if constexpr (kFmt == Format::kFp8) return kTile * (kPitchK + (shared_v ? 0u : kPitchV));
  return nv_v_scales_at(shared_v) + kTile * kNvScalePitch;
}
static_assert(contract::tiled_nvfp4_stage_bytes(false) % 16 == 0 &&
                  contract::tiled_nvfp4_stage_bytes(true) % 16 == 0 &&
                  contract::nvfp4_rows_bytes(kNvRow) % 16 == 0 &&
                  contract::nvfp4_rows_bytes(kNvVRow) % 16 == 0,
              "16-byte copies into every stage; 8-byte aligned mbarriers");

// Named barriers the staging warps never join: 1 + team for a team of
// consumer warps, kConsumersBar for all of them.
constexpr uint32_t kConsumersBar = 3;
__device__ __forceinline__ void named_sync(uint32_t bar, uint32_t threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(bar), "r"(threads) : "memory");
}

// mbarriers (sm_80 and newer) hand the stages between the staging warps and
// the consumers.
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t arrivals) {
  asm volatile("mbarrier.init.shared.b64 [%0], %1;" ::"r"(bar), "r"(arrivals) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("{\n .reg .b64 st;\n mbarrier.arrive.shared.b64 st, [%0];\n}" ::"r"(bar) : "memory");
}
// One arrival on the barrier once this thread's cp.async issued so far have
// landed.
__device__ __forceinline__ void mbar_arrive_after_cp_async(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared.b64 [%0];" ::"r"(bar) : "memory");
}
// Waits until the phase with this parity has completed.
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  while (!done)
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared.b64 p, [%1], %2;\n"
        " selp.u32 %0, 1, 0, p;\n}"
#else
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.test_wait.parity.shared.b64 p, [%1], %2;\n"
        " selp.u32 %0, 1, 0, p;\n}"
#endif
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
}

__device__ __forceinline__ void mma_f16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                        uint32_t b1) {
  sparkrt_kernels::mma_k16<true>(d, a[0], a[1], a[2], a[3], b0, b1);
}

// Four E4M3 bytes to two f16x2 words: bytes 0-1 and bytes 2-3. One
// conversion instruction per word on sm_89 and newer; the library's
// emulation before (the compute_80 PTX).
__device__ __forceinline__ void fp8x4_to_half2x2(uint32_t w, uint32_t& lo, uint32_t& hi) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  asm("{\n .reg .b16 l, h;\n mov.b32 {l, h}, %2;\n cvt.rn.f16x2.e4m3x2 %0, l;\n"
      " cvt.rn.f16x2.e4m3x2 %1, h;\n}"
      : "=r"(lo), "=r"(hi)
      : "r"(w));
#else
  lo = sparkrt_kernels::fp8x2_to_half2_bits(w & 0xffffu);
  hi = sparkrt_kernels::fp8x2_to_half2_bits(w >> 16);
#endif
}

// Two E4M3 bytes (the word's low half) to an f16x2 word, exactly.
__device__ __forceinline__ uint32_t fp8x2_to_half2(uint32_t w) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  uint32_t h;
  asm("{\n .reg .b16 l, u;\n mov.b32 {l, u}, %1;\n cvt.rn.f16x2.e4m3x2 %0, l;\n}"
      : "=r"(h)
      : "r"(w));
  return h;
#else
  return sparkrt_kernels::fp8x2_to_half2_bits(w & 0xffffu);
#endif
}

// Eight E2M1 codes (code j in bits 4j .. 4j + 3 of w) to four f16x2 words:
// r[0] = codes (0, 2), r[1] = (4, 6), r[2] = (1, 3), r[3] = (5, 7) (low
// half, high half), each the code's value times 1 / kE2m1Unit, exactly.
// Each code's sign moves to bit 7 and its exponent and mantissa to bits
// 4..2 of a byte, the E4M3 encoding of e2m1 * 2^-6 (E2M1's subnormal 0.5
// becomes an E4M3 subnormal), which the fp8 conversion turns into f16.
constexpr float kE2m1Unit = 64.0f;  // undoes the 2^-6
__device__ __forceinline__ void e2m1x8_to_half2x4(uint32_t w, uint32_t (&r)[4]) {
  const uint32_t even = ((w << 4) & 0x80808080u) | ((w << 2) & 0x1c1c1c1cu);  // codes 0, 2, 4, 6
  const uint32_t odd = (w & 0x80808080u) | ((w >> 2) & 0x1c1c1c1cu);         // codes 1, 3, 5, 7
  fp8x4_to_half2x2(even, r[0], r[1]);
  fp8x4_to_half2x2(odd, r[2], r[3]);
}

// x * s on f16 pairs; s_half 0 multiplies both by s's low half, 1 by its
// high half, 2 pairwise. Exact for the NVFP4 operands: e2m1 / kE2m1Unit
// times an E4M3 scale has at most 6 significant bits and lies in [2^-16,
// 42].
__device__ __forceinline__ uint32_t scale_f16x2(uint32_t x, uint32_t s, int s_half) {
  __half2 hx, hs;
  memcpy(&hx, &x, 4);
  memcpy(&hs, &s, 4);
  const __half2 f = s_half == 0 ? __low2half2(hs) : s_half == 1 ? __high2half2(hs) : hs;
  const __half2 r = __hmul2(hx, f);
  uint32_t out;
  memcpy(&out, &r, 4);
  return out;
}

// A compile-time switch passed to a generic lambda.
template <bool kValue>
struct Whole {
  static constexpr bool value = kValue;
};

// Everything a tiled CTA needs; the entries fill it.
struct Params {
  const __nv_bfloat16* q;
  const uint8_t* k_cache;
  const uint8_t* v_cache;
  const int32_t* block_tables;
  const int32_t* seq_lens;
  const float* sinks;  // one pass only; null: none
  const uint8_t* comp_pool;
  __nv_bfloat16* o;  // one pass
  float* part_acc;   // split
  float* part_ml;    // split
  uint32_t max_blocks_per_seq, num_q_heads, num_kv_heads, q_head_dim, kv_cache_dim, block_size;
  float inv_sqrt_d, k_scale, v_scale;
  uint64_t cache_stride;  // bytes per block (NVFP4: block_stride_bytes)
  uint32_t sliding_window, comp_block_count;
  bool split;  // partials to part_acc/part_ml instead of o
  uint64_t data_section;  // NVFP4: where a block's scales start
};

// One CTA's view: which heads, which tokens, where they live.
struct Cta {
  uint32_t seq, kvh, head0, hpc, split, splits;
  uint32_t n_comp, t0, u_begin, u_end;  // virtual tokens [u_begin, u_end) of this split
  uint64_t row;                         // values (fp8: bytes) per token, every KV head
  const int32_t* table;
  const uint8_t* comp;

  __device__ explicit Cta(const Params& p) {
    const uint32_t group = p.num_q_heads / p.num_kv_heads;
    const uint32_t ctas_per_kvh = (group + kRows - 1) / kRows;
    kvh = blockIdx.x / ctas_per_kvh;
    const uint32_t first = (blockIdx.x % ctas_per_kvh) * kRows;
    head0 = kvh * group + first;
    hpc = min(kRows, group - first);
    seq = blockIdx.y;
    split = blockIdx.z;
    splits = gridDim.z;
    row = uint64_t{p.num_kv_heads} * kDim;
    table = p.block_tables + uint64_t{seq} * p.max_blocks_per_seq;
    const int32_t sl = p.seq_lens[seq];
    const uint64_t cap = uint64_t{p.max_blocks_per_seq} * p.block_size;
    const uint32_t len = sl <= 0 ? 0u : uint32_t(uint64_t(sl) < cap ? uint64_t(sl) : cap);
    t0 = p.sliding_window > 0 && len > p.sliding_window ? len - p.sliding_window : 0u;
    n_comp = p.comp_pool != nullptr ? p.comp_block_count : 0u;
    comp = p.comp_pool + (uint64_t{seq} * n_comp * row + uint64_t{kvh} * kDim);
    // Splits take whole tiles: ceil(tiles / splits) each, the last ones fewer.
    const uint32_t n = n_comp + (len - t0);
    const uint32_t tiles = (n + kTile - 1) / kTile;
    const uint32_t per = (tiles + splits - 1) / splits;
    u_begin = min(n, split * per * kTile);
    u_end = min(n, (split + 1) * per * kTile);
  }
};

// Where this thread's token of a tile comes from: 4 threads per token.
struct Source {
  const uint8_t* k;
  const uint8_t* v;
  bool ok;  // false: past the split or behind a negative block (zeros)
};
// The same for an NVFP4 token: its data row and its scale bytes in each pool.
struct NvSource {
  const uint8_t *k, *k_scales, *v, *v_scales;
  bool ok;
};

// 4 bytes global -> shared (sm_80+); src_bytes 0 writes zeros and reads
// nothing. For the NVFP4 scale bytes, whose rows are only 4-byte aligned.
// No L2 cache hint: the 4-byte form with one faults as an illegal
// instruction on an H200 (driver 580).
__device__ __forceinline__ void cp_async4(void* dst, const void* src, uint32_t src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(smem_addr(dst)), "l"(src),
               "r"(src_bytes));
}

// The staging warps (8 and 9) fill stage tile % n_stages with the tile's rows
// once the consumers have released it: 16-byte cp.async chunks, lane 4j + c
// of staging warp sw taking chunks c, c + 4, ... of tokens 8 sw + j,
// 8 (sw + 2) + j, ... (each instruction reads 64 whole bytes of 8 rows;
// NVFP4 scale bytes in 4-byte copies, words c, c + 4, ... of the token's).
// A token past the split or behind a negative block gets a zero row (and
// zero scales) and flag 0.
// Each stage has two mbarriers in its flag bytes: `full` completes when every
// staging lane has arrived and its copies have landed
// (cp.async.mbarrier.arrive: the lane does not wait for them), `empty` when
// the threads of the team that consumed it are done reading the stage.
template <Format kFmt>
__device__ __forceinline__ void stage_rows(const Params& p, const Cta& cta, uint8_t* stages,
                                           uint32_t n_stages, uint32_t n_tiles) {
  // Staging warp sw takes the groups of 8 rows sw, sw + kStagingWarps, ...
  constexpr uint32_t kGroupsOf8 = kTile / 8 / kStagingWarps;
  const uint32_t lane = threadIdx.x % 32, j = lane / 4, part = lane % 4;
  const uint32_t sw = threadIdx.x / 32 - kWarps;
  const bool shared_v = p.v_cache == p.k_cache;
  const uint32_t sbytes = stage_bytes<kFmt>(shared_v);
  const uint32_t flags_at = flags_offset<kFmt>(shared_v);
  const sparkrt_kernels::BlockDiv bdiv(p.block_size);
  // The block-table entries of this lane's tokens of a tile (0 where none is
  // read), loaded an iteration before their use.
  using Entries = int32_t[kGroupsOf8];
  auto load_entries = [&](uint32_t tile, Entries& e) {
#pragma unroll
    for (uint32_t i = 0; i < kGroupsOf8; ++i) {
      const uint32_t u = cta.u_begin + tile * kTile + 8 * (sw + kStagingWarps * i) + j;
      e[i] = u >= cta.u_end || u < cta.n_comp ? 0 : cta.table[bdiv.div(cta.t0 + (u - cta.n_comp))];
    }
  };
  auto locate = [&](uint32_t tile, uint32_t r, int32_t block) {
    const uint32_t u = cta.u_begin + tile * kTile + r;
    Source s{p.k_cache, p.v_cache, u < cta.u_end};
    if (s.ok && u < cta.n_comp) {
      s.k = s.v = cta.comp + uint64_t{u} * cta.row;
    } else if (s.ok) {
      const uint32_t tok = cta.t0 + (u - cta.n_comp);
      s.ok = block >= 0;
      const uint64_t off = uint64_t(s.ok ? block : 0) * p.cache_stride +
                           uint64_t{bdiv.mod(tok)} * cta.row + uint64_t{cta.kvh} * kDim;
      s.k += off;
      s.v += off;
    }
    if (!s.ok) s.k = s.v = p.k_cache;
    return s;
  };
  // An NVFP4 token (no compressed rows): value i of its block's values has
  // its code in data byte i / 2 and its scale at data_section + i / 16.
  auto nv_locate = [&](uint32_t tile, uint32_t r, int32_t block) {
    const uint32_t u = cta.u_begin + tile * kTile + r;
    NvSource s{p.k_cache, p.k_cache, p.v_cache, p.v_cache, u < cta.u_end && block >= 0};
    if (s.ok) {
      const uint64_t base = uint64_t(block) * p.cache_stride;
      const uint64_t i =
          uint64_t{bdiv.mod(cta.t0 + (u - cta.n_comp))} * cta.row + uint64_t{cta.kvh} * kDim;
      s.k += base + i / 2;
      s.v += base + i / 2;
      s.k_scales += base + p.data_section + i / 16;
      s.v_scales += base + p.data_section + i / 16;
    }
    return s;
  };
  // K/V rows are read once: they leave L2 first, so the block tables and the
  // code stay.
  const uint64_t policy = sparkrt_kernels::evict_first_policy();
  auto issue = [&](uint32_t tile, uint8_t* base, const Entries& e) {
#pragma unroll
    for (uint32_t i = 0; i < kGroupsOf8; ++i) {
      const uint32_t r = 8 * (sw + kStagingWarps * i) + j;
      if constexpr (kFmt == Format::kFp8) {
        const Source s = locate(tile, r, e[i]);
        const uint32_t n = s.ok ? 16u : 0u;  // 0: the chunk is zero-filled
        uint8_t* krow = base + r * kPitchK;
#pragma unroll
        for (uint32_t c = part; c < kDim / 16; c += 4)
          cp_async16(krow + 16 * c, s.k + 16 * c, n, policy);
        if (!shared_v) {
          uint8_t* vrow = base + kTile * kPitchK + r * kPitchV;
#pragma unroll
          for (uint32_t c = part; c < kDv / 16; c += 4)
            cp_async16(vrow + 16 * c, s.v + 16 * c, n, policy);
        }
        if (part == 0) base[flags_at + r] = s.ok;
      } else {
        const NvSource s = nv_locate(tile, r, e[i]);
        const uint32_t n = s.ok ? 16u : 0u, n_scale = s.ok ? 4u : 0u;
        const uint32_t k_scales_at = nv_k_scales_at(shared_v);
        uint8_t* krow = base + nv_row_at(r, kNvRow);
#pragma unroll
        for (uint32_t c = part; c < kNvRow / 16; c += 4)
          cp_async16(krow + 16 * c, s.k + 16 * c, n, policy);
        uint8_t* kscales = base + k_scales_at + r * kNvScalePitch;
#pragma unroll
        for (uint32_t c = part; c < kNvGroups / 4; c += 4)
          cp_async4(kscales + 4 * c, s.k_scales + 4 * c, n_scale);
        if (!shared_v) {
          uint8_t* vrow = base + contract::nvfp4_rows_bytes(kNvRow) + nv_row_at(r, kNvVRow);
#pragma unroll
          for (uint32_t c = part; c < kNvVRow / 16; c += 4)
            cp_async16(vrow + 16 * c, s.v + 16 * c, n, policy);
          uint8_t* vscales = base + nv_v_scales_at(false) + r * kNvScalePitch;
#pragma unroll
          for (uint32_t c = part; c < kDv / 16 / 4; c += 4)
            cp_async4(vscales + 4 * c, s.v_scales + 4 * c, n_scale);
        }
        if (part == 0) base[flags_at + r] = s.ok;
      }
    }
  };
  Entries entry;
  load_entries(0, entry);
  // Stage `slot` takes tile, tile + n_stages, ...; its n-th use waits for
  // the (n - 1)-th to be staged (this warp's own phase, long complete) and
  // consumed, the phase of parity (n - 1) & 1.
  uint32_t slot = 0, parity = 1;
  for (uint32_t tile = 0; tile < n_tiles; ++tile) {
    uint8_t* base = stages + slot * sbytes;
    const uint32_t full = smem_addr(base + flags_at + kTile), empty = full + 8;
    Entries next;
    load_entries(tile + 1, next);
    if (tile >= n_stages) {
      mbar_wait(full, parity);
      mbar_wait(empty, parity);
    }
    issue(tile, base, entry);
    mbar_arrive_after_cp_async(full);
    mbar_arrive(full);
#pragma unroll
    for (uint32_t i = 0; i < kGroupsOf8; ++i) entry[i] = next[i];
    if (++slot == n_stages) {
      slot = 0;
      parity ^= 1u;
    }
  }
  // The warp may finish before its last copies land: the consumers wait for
  // every stage, so the CTA (and its shared memory) outlives them.
}

// Where an NVFP4 consumer lane (g, t) of team warp tw reads a stage (the
// scores' rows half * kScoreTokens + g + 8i, quarter tw % 4 of the dims):
// its scale groups of a K row, grp0 and grp1 = grp0 + 4 (k-steps 0-3 and
// 4-7 of the quarter, 8 code bytes each) and the quarter's last, grp2
// (k-step 8, 2 code bytes at 2t); the offsets of those codes and scale bytes
// in n-tile 0 (n-tile i is i kNvRows8 further); the output's V rows 4t + r
// at the lane's 4 bytes (8 dims, one scale group) of group tw (rows 16 kk +
// 4t + r are kk v16 + r vpitch further) and their scale words, and the byte
// of the lane's group in a scale word, for two rows; byte masks that give
// the groups past q_head_dim scale 0 (their codes add 0, and no NaN scale
// of theirs is read).
struct NvLane {
  uint32_t grp0, grp1, grp2;
  uint32_t s_off, s2_off, sc_off;
  uint32_t vpitch, v16, v_off, vs_off, vs_sel;
  uint32_t mask01, mask2;
};
template <uint32_t kScoreTokens>
__device__ __forceinline__ NvLane nv_lane(uint32_t tw, uint32_t g, uint32_t t, bool shared_v,
                                          uint32_t q_head_dim) {
  NvLane l;
  const uint32_t quarter = tw % kQuarters, row = tw / kQuarters * kScoreTokens + g;
  l.grp0 = kNvQuarterGroups * quarter + t;
  l.grp1 = l.grp0 + 4;
  l.grp2 = kNvQuarterGroups * quarter + 8;
  l.s_off = nv_row_at(row, kNvRow) + 8 * l.grp0;
  l.s2_off = nv_row_at(row, kNvRow) + 8 * l.grp2 + 2 * t;
  l.sc_off = nv_k_scales_at(shared_v) + row * kNvScalePitch;
  l.vpitch = shared_v ? kNvRow : kNvVRow;
  l.v16 = 16 * l.vpitch + 4 * contract::kNvfp4RowSkew;
  l.v_off = (shared_v ? 0u : contract::nvfp4_rows_bytes(kNvRow)) + nv_row_at(4 * t, l.vpitch) +
            32 * tw + 4 * g;
  l.vs_off = nv_v_scales_at(shared_v) + 4 * t * kNvScalePitch + 4 * tw;
  l.vs_sel = (g >> 1) | ((4 + (g >> 1)) << 4);
  const uint32_t groups_in = q_head_dim / 16;
  l.mask01 = (l.grp0 < groups_in ? 0xffu : 0u) | (l.grp1 < groups_in ? 0xff00u : 0u);
  l.mask2 = l.grp2 < groups_in ? 0xffffu : 0u;
  return l;
}

// The consumers form kTeams teams of 8 / kTeams warps; team i takes tiles
// i, i + kTeams, ... with its own softmax state and output accumulators, so
// one team's barriers and softmax overlap the other's products. At the end
// the teams' states merge in shared memory (the stages are free by then).
template <Format kFmt, uint32_t kTeams>
__device__ __forceinline__ void decode(const Params& p, uint8_t* smem, uint32_t n_stages) {
  constexpr bool kNv = kFmt == Format::kNvfp4;
  constexpr uint32_t kTeamWarps = kWarps / kTeams;
  constexpr uint32_t kTeamThreads = 32 * kTeamWarps;
  constexpr uint32_t kScoreTokens = kTile * kQuarters / kTeamWarps;  // tokens a warp scores
  constexpr uint32_t kNt = kScoreTokens / 8;                         // their n-tiles
  // Output groups: 4 n-tiles of 8 dims (fp8), 8 (NVFP4: 8 dims a lane, one
  // scale group, from one 32-bit load of a token's codes).
  constexpr uint32_t kNtOut = kNv ? 8 : 4;
  constexpr uint32_t kOutGroups = kDv / (8 * kNtOut) / kTeamWarps;  // groups a warp owns
  constexpr uint32_t kRowThreads = kTeamThreads / kRows;             // softmax threads a row
  constexpr uint32_t kChunks = kTile / 4 / kRowThreads;              // 4-token chunks a thread
  Fixed<kTeams>& f = *reinterpret_cast<Fixed<kTeams>*>(smem);
  const Cta cta(p);
  const uint32_t tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const uint32_t g = lane >> 2, t = lane & 3;
  const uint32_t qd = p.q_head_dim;
  const bool shared_v = p.v_cache == p.k_cache;
  const uint32_t sbytes = stage_bytes<kFmt>(shared_v);
  uint8_t* const stages = smem + sizeof(Fixed<kTeams>);
  const uint32_t flags_at = flags_offset<kFmt>(shared_v);
  const uint32_t n_tiles = (cta.u_end - cta.u_begin + kTile - 1) / kTile;
  auto full_of = [&](uint32_t slot) {
    return smem_addr(stages + slot * sbytes + flags_at + kTile);
  };
  if (tid < n_stages) {
    mbar_init(full_of(tid), 64 * kStagingWarps);  // each staging lane and its copies
    mbar_init(full_of(tid) + 8, kTeamThreads);    // every thread of the consuming team
  }
  // The teams' hand-over at the end: `rows` completes when every consumer
  // thread has written its row state, `accs` when team 1 has written its
  // accumulators (in stage 0's otherwise unused flag bytes).
  const uint32_t rows = full_of(0) + 16, accs = rows + 8;
  if (tid == 0) {
    mbar_init(rows, kThreads);
    mbar_init(accs, kTeamThreads);
  }
  __syncthreads();  // the last barrier the staging warps join
  if (warp >= kWarps) return stage_rows<kFmt>(p, cta, stages, n_stages, n_tiles);

  // ── q: each head's power-of-two scale, then this warp's A fragments.
  {
    const uint32_t r = tid >> 4, j = tid & 15;
    float mx = 0.0f;
    if (r < cta.hpc) {
      const __nv_bfloat16* qr = p.q + (uint64_t{cta.seq} * p.num_q_heads + cta.head0 + r) * qd;
      for (uint32_t d = j; d < qd; d += 16) mx = fmaxf(mx, fabsf(__bfloat162float(qr[d])));
    }
#pragma unroll
    for (int m = 8; m >= 1; m /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, m));
    int e = 0;
    if (mx > 0.0f && mx <= 3.4e38f) {
      frexpf(mx, &e);
      e = 14 - e;  // |q| * 2^e < 2^14
    }
    if (j == 0) f.q_scale[r] = ldexpf(1.0f, e);
  }
  named_sync(kConsumersBar, kThreads);
  const uint32_t team = warp / kTeamWarps, tw = warp % kTeamWarps, ttid = tid % kTeamThreads;
  TeamState& ts = f.team[team];
  const uint32_t quarter = tw % kQuarters, half = tw / kQuarters;
  const uint32_t ksteps = qd / 16;
  const uint32_t ks0 = quarter * kKsteps;  // this warp's k-steps: ks0 .. + 8 below ksteps
  NvLane nv;
  if constexpr (kNv) nv = nv_lane<kScoreTokens>(tw, g, t, shared_v, qd);
  uint32_t qa[kKsteps][4];
  {
    const float s_lo = f.q_scale[g], s_hi = f.q_scale[g + 8];
    const __nv_bfloat16* q_lo = p.q + (uint64_t{cta.seq} * p.num_q_heads + cta.head0 + g) * qd;
    const __nv_bfloat16* q_hi = q_lo + uint64_t{8} * qd;
    auto qv = [&](const __nv_bfloat16* qr, uint32_t row, uint32_t d, float s) {
      return row < cta.hpc && d < qd ? __bfloat162float(qr[d]) * s : 0.0f;
    };
    if constexpr (!kNv) {
#pragma unroll
      for (uint32_t k = 0; k < kKsteps; ++k) {
        const uint32_t d = 16 * (ks0 + k) + 4 * t;
        qa[k][0] = pack_f16(qv(q_lo, g, d, s_lo), qv(q_lo, g, d + 1, s_lo));
        qa[k][1] = pack_f16(qv(q_hi, g + 8, d, s_hi), qv(q_hi, g + 8, d + 1, s_hi));
        qa[k][2] = pack_f16(qv(q_lo, g, d + 2, s_lo), qv(q_lo, g, d + 3, s_lo));
        qa[k][3] = pack_f16(qv(q_hi, g + 8, d + 2, s_hi), qv(q_hi, g + 8, d + 3, s_hi));
      }
    } else {
      // The dims of this lane's k values, as the scores build their
      // operands: k-step 4b + 2h + e takes codes e, e + 2 (b0) and e + 4,
      // e + 6 (b1) of word h of group grp0 + 4b; k-step 8 codes 0, 2 (b0)
      // and 1, 3 (b1) of the 16 bits at 2t of group grp2.
#pragma unroll
      for (uint32_t k = 0; k < kKsteps; ++k) {
        const uint32_t d = k < 8 ? 16 * (nv.grp0 + 4 * (k / 4)) + 8 * (k / 2 % 2) + k % 2
                                 : 16 * nv.grp2 + 4 * t;
        const uint32_t d1 = d + (k < 8 ? 4 : 1);  // b1's first dim
        qa[k][0] = pack_f16(qv(q_lo, g, d, s_lo), qv(q_lo, g, d + 2, s_lo));
        qa[k][1] = pack_f16(qv(q_hi, g + 8, d, s_hi), qv(q_hi, g + 8, d + 2, s_hi));
        qa[k][2] = pack_f16(qv(q_lo, g, d1, s_lo), qv(q_lo, g, d1 + 2, s_lo));
        qa[k][3] = pack_f16(qv(q_hi, g + 8, d1, s_hi), qv(q_hi, g + 8, d1 + 2, s_hi));
      }
    }
  }

  // ── softmax state: team thread ttid owns row sm_row, tokens sm_col + 4 c
  // + 4 kRowThreads i .. + 3 for chunk i (conflict-free 16-byte reads).
  const uint32_t sm_row = ttid / kRowThreads, sm_col = (ttid % kRowThreads) * 4;
  const float score_scale =
      sm_row < cta.hpc ? p.inv_sqrt_d * p.k_scale * kLog2e / f.q_scale[sm_row] : 0.0f;
  float m_run = -INFINITY, l_run = 0.0f;

  // ── per-thread shared-memory offsets (NVFP4: NvLane). Scores: row half *
  // kScoreTokens + g (n-tile i adds 8 rows), this lane's 4 bytes of the
  // warp's first k-step. Output: V rows 4t + r (a k-step adds 16 rows) at
  // this lane's 4 dims of group tw (group tw + k kTeamWarps is 32 k
  // kTeamWarps bytes further).
  const uint32_t s_off = (half * kScoreTokens + g) * kPitchK + 16 * ks0 + 4 * t;
  const uint32_t vpitch = shared_v ? kPitchK : kPitchV;
  const uint32_t v_off = (shared_v ? 0u : kTile * kPitchK) + 4 * t * vpitch + 32 * tw + 4 * g;

  // ── output accumulators: groups tw + k kTeamWarps of 32 dims; n-tile j's
  // column c is dim 32 * group + 4 * c + j (NVFP4: groups of 64 dims, dim
  // 64 * group + 8 * c + j).
  float oacc[kOutGroups][kNtOut][4];
#pragma unroll
  for (uint32_t k = 0; k < kOutGroups; ++k)
#pragma unroll
    for (uint32_t j = 0; j < kNtOut; ++j)
#pragma unroll
      for (uint32_t e = 0; e < 4; ++e) oacc[k][j][e] = 0.0f;

  // This team's tile, its stage and the parity of that stage's phase.
  uint32_t slot = team, parity = 0;
  for (uint32_t tile = team; tile < n_tiles; tile += kTeams) {
    const uint8_t* stage = stages + slot * sbytes;
    mbar_wait(full_of(slot), parity);

    // Scores: kNt n-tiles of 8 tokens over this warp's quarter of the dims,
    // 4 at a time (registers). A quarter wholly inside q_head_dim (all four
    // for the MLA row) runs without per-step bounds checks, so the compiler
    // can issue a step's loads ahead of the previous step's products.
    auto scores = [&](auto whole) {
#pragma unroll
      for (uint32_t n0 = 0; n0 < kNt; n0 += 4) {
        float sacc[4][4];
#pragma unroll
        for (uint32_t i = 0; i < 4; ++i)
#pragma unroll
          for (uint32_t e = 0; e < 4; ++e) sacc[i][e] = 0.0f;
        if constexpr (!kNv) {
          const uint8_t* srow = stage + s_off + n0 * 8 * kPitchK;
#pragma unroll
          for (uint32_t k = 0; k < kKsteps; ++k) {
            if constexpr (!decltype(whole)::value) {
              if (ks0 + k >= ksteps) break;
            }
#pragma unroll
            for (uint32_t i = 0; i < 4; ++i) {
              uint32_t b0, b1;
              fp8x4_to_half2x2(*reinterpret_cast<const uint32_t*>(srow + i * 8 * kPitchK + 16 * k),
                               b0, b1);
              mma_f16(sacc[i], qa[k], b0, b1);
            }
          }
        } else {
          uint32_t last[4], last_scale[4];  // each token's codes and scale of grp2
#pragma unroll
          for (uint32_t i = 0; i < 4; ++i) {
            const uint32_t nt = n0 + i;
            const uint32_t row = nt * kNvRows8, srow = nt * 8 * kNvScalePitch;
            uint32_t sc = uint32_t{stage[nv.sc_off + srow + nv.grp0]} |
                          (uint32_t{stage[nv.sc_off + srow + nv.grp1]} << 8);
            last_scale[i] = stage[nv.sc_off + srow + nv.grp2];
            if constexpr (!decltype(whole)::value) sc &= nv.mask01;
            const uint32_t s01 = fp8x2_to_half2(sc);  // the scales of grp0, grp1
            const uint2 c0 = *reinterpret_cast<const uint2*>(stage + nv.s_off + row);
            const uint2 c1 = *reinterpret_cast<const uint2*>(stage + nv.s_off + row + 32);
            last[i] = *reinterpret_cast<const uint16_t*>(stage + nv.s2_off + row);
            const uint32_t words[4] = {c0.x, c0.y, c1.x, c1.y};
#pragma unroll
            for (uint32_t h = 0; h < 4; ++h) {
              uint32_t b[4];
              e2m1x8_to_half2x4(words[h], b);
              const int s_half = h / 2;
              mma_f16(sacc[i], qa[2 * h], scale_f16x2(b[0], s01, s_half),
                      scale_f16x2(b[1], s01, s_half));
              mma_f16(sacc[i], qa[2 * h + 1], scale_f16x2(b[2], s01, s_half),
                      scale_f16x2(b[3], s01, s_half));
            }
          }
          // grp2: two tokens' 16 bits make one word of codes.
#pragma unroll
          for (uint32_t i = 0; i < 4; i += 2) {
            uint32_t sc = last_scale[i] | (last_scale[i + 1] << 8);
            if constexpr (!decltype(whole)::value) sc &= nv.mask2;
            const uint32_t s = fp8x2_to_half2(sc);
            uint32_t b[4];  // (token i: codes 0, 2), (i + 1: 0, 2), (i: 1, 3), (i + 1: 1, 3)
            e2m1x8_to_half2x4(last[i] | (last[i + 1] << 16), b);
            mma_f16(sacc[i], qa[8], scale_f16x2(b[0], s, 0), scale_f16x2(b[2], s, 0));
            mma_f16(sacc[i + 1], qa[8], scale_f16x2(b[1], s, 1), scale_f16x2(b[3], s, 1));
          }
        }
#pragma unroll
        for (uint32_t i = 0; i < 4; ++i) {
          const uint32_t col = half * kScoreTokens + (n0 + i) * 8 + 2 * t;
          *reinterpret_cast<float2*>(&ts.red[quarter][g][col]) =
              make_float2(sacc[i][0], sacc[i][1]);
          *reinterpret_cast<float2*>(&ts.red[quarter][g + 8][col]) =
              make_float2(sacc[i][2], sacc[i][3]);
        }
      }
    };
    if (ks0 + kKsteps <= ksteps)
      scores(Whole<true>{});
    else
      scores(Whole<false>{});
    named_sync(1 + team, kTeamThreads);

    // Softmax over the tile, base 2.
    {
      float s[kChunks][4];
#pragma unroll
      for (uint32_t c = 0; c < kChunks; ++c) {
        const uint32_t col = sm_col + 4 * kRowThreads * c;
        s[c][0] = s[c][1] = s[c][2] = s[c][3] = 0.0f;
#pragma unroll
        for (uint32_t qq = 0; qq < kQuarters; ++qq) {
          const float4 v = *reinterpret_cast<const float4*>(&ts.red[qq][sm_row][col]);
          s[c][0] += v.x;
          s[c][1] += v.y;
          s[c][2] += v.z;
          s[c][3] += v.w;
        }
      }
      float mx = -INFINITY;
#pragma unroll
      for (uint32_t c = 0; c < kChunks; ++c) {
        const uint32_t oks =
            *reinterpret_cast<const uint32_t*>(stage + flags_at + sm_col + 4 * kRowThreads * c);
#pragma unroll
        for (uint32_t j = 0; j < 4; ++j) {
          s[c][j] = (oks >> (8 * j)) & 0xffu ? s[c][j] * score_scale : -INFINITY;
          mx = fmaxf(mx, s[c][j]);
        }
      }
#pragma unroll
      for (uint32_t m = kRowThreads / 2; m >= 1; m /= 2)
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, m));
      const float m_new = fmaxf(m_run, mx);
      const float alpha = m_new == -INFINITY ? 1.0f : exp2f(m_run - m_new);
      float sum = 0.0f;
#pragma unroll
      for (uint32_t c = 0; c < kChunks; ++c) {
        float pr[4];
#pragma unroll
        for (uint32_t j = 0; j < 4; ++j) {
          pr[j] = s[c][j] == -INFINITY ? 0.0f : exp2f(s[c][j] - m_new);
          sum += pr[j];
        }
        *reinterpret_cast<uint2*>(&ts.p[sm_row][sm_col + 4 * kRowThreads * c]) =
            make_uint2(pack_f16(pr[0], pr[1]), pack_f16(pr[2], pr[3]));
      }
#pragma unroll
      for (uint32_t m = kRowThreads / 2; m >= 1; m /= 2)
        sum += __shfl_xor_sync(0xffffffffu, sum, m);
      l_run = l_run * alpha + sum;
      m_run = m_new;
      if (ttid % kRowThreads == 0) ts.alpha[sm_row] = alpha;
    }
    named_sync(1 + team, kTeamThreads);

    // O = O * alpha + P V (the rescale is skipped while no row's max moved).
    {
      const float a_lo = ts.alpha[g], a_hi = ts.alpha[g + 8];
      if (__any_sync(0xffffffffu, a_lo != 1.0f || a_hi != 1.0f)) {
#pragma unroll
        for (uint32_t k = 0; k < kOutGroups; ++k)
#pragma unroll
          for (uint32_t j = 0; j < kNtOut; ++j) {
            oacc[k][j][0] *= a_lo;
            oacc[k][j][1] *= a_lo;
            oacc[k][j][2] *= a_hi;
            oacc[k][j][3] *= a_hi;
          }
      }
#pragma unroll
      for (uint32_t kk = 0; kk < kTile / 16; ++kk) {
        const uint2 plo = *reinterpret_cast<const uint2*>(&ts.p[g][16 * kk + 4 * t]);
        const uint2 phi = *reinterpret_cast<const uint2*>(&ts.p[g + 8][16 * kk + 4 * t]);
        const uint32_t a[4] = {plo.x, phi.x, plo.y, phi.y};
#pragma unroll
        for (uint32_t k = 0; k < kOutGroups; ++k) {
          uint32_t w[4];
          if constexpr (!kNv) {
#pragma unroll
            for (uint32_t r = 0; r < 4; ++r)
              w[r] = *reinterpret_cast<const uint32_t*>(stage + v_off + (16 * kk + r) * vpitch +
                                                        32 * kTeamWarps * k);
            // Byte j of w[r] is token 4t + r, dim 4g + j: pair tokens per dim.
            uint32_t b0[4], b1[4];
            fp8x4_to_half2x2(sparkrt_kernels::prmt(w[0], w[1], 0x5140), b0[0], b0[1]);
            fp8x4_to_half2x2(sparkrt_kernels::prmt(w[0], w[1], 0x7362), b0[2], b0[3]);
            fp8x4_to_half2x2(sparkrt_kernels::prmt(w[2], w[3], 0x5140), b1[0], b1[1]);
            fp8x4_to_half2x2(sparkrt_kernels::prmt(w[2], w[3], 0x7362), b1[2], b1[3]);
#pragma unroll
            for (uint32_t j = 0; j < 4; ++j) mma_f16(oacc[k][j], a, b0[j], b1[j]);
          } else {
            // Code j of w[r] is token 4t + r, dim 8g + j of the group, scaled
            // by the token's scale of the group: pair tokens per dim, bytes
            // interleaved so that codes j of two tokens meet in one word.
            uint32_t sw[4];
#pragma unroll
            for (uint32_t r = 0; r < 4; ++r) {
              w[r] = *reinterpret_cast<const uint32_t*>(stage + nv.v_off + kk * nv.v16 +
                                                        r * nv.vpitch + 32 * kTeamWarps * k);
              sw[r] = *reinterpret_cast<const uint32_t*>(
                  stage + nv.vs_off + (16 * kk + r) * kNvScalePitch + 4 * kTeamWarps * k);
            }
            const uint32_t s01 = fp8x2_to_half2(sparkrt_kernels::prmt(sw[0], sw[1], nv.vs_sel));
            const uint32_t s23 = fp8x2_to_half2(sparkrt_kernels::prmt(sw[2], sw[3], nv.vs_sel));
            uint32_t b0[8], b1[8];
            auto pair = [&](uint32_t wa, uint32_t wb, uint32_t s, uint32_t(&b)[8]) {
              // The interleaved word holds wa's codes 0, 1, wb's 0, 1, wa's 2,
              // 3, wb's 2, 3: its code pairs (0, 2), (4, 6), (1, 3), (5, 7)
              // are dims 0, 2, 1, 3 of the two tokens (the second word's: 4,
              // 6, 5, 7).
              uint32_t r[4];
              e2m1x8_to_half2x4(sparkrt_kernels::prmt(wa, wb, 0x5140), r);
              b[0] = scale_f16x2(r[0], s, 2);
              b[2] = scale_f16x2(r[1], s, 2);
              b[1] = scale_f16x2(r[2], s, 2);
              b[3] = scale_f16x2(r[3], s, 2);
              e2m1x8_to_half2x4(sparkrt_kernels::prmt(wa, wb, 0x7362), r);
              b[4] = scale_f16x2(r[0], s, 2);
              b[6] = scale_f16x2(r[1], s, 2);
              b[5] = scale_f16x2(r[2], s, 2);
              b[7] = scale_f16x2(r[3], s, 2);
            };
            pair(w[0], w[1], s01, b0);
            pair(w[2], w[3], s23, b1);
#pragma unroll
            for (uint32_t j = 0; j < 8; ++j) mma_f16(oacc[k][j], a, b0[j], b1[j]);
          }
        }
      }
    }
    // This thread is done with the stage: once every thread of the team has
    // arrived, the staging warps may refill it. (Each thread's own arrival
    // orders its reads, which race checkers follow; one arrival per warp
    // after a warp barrier measured no faster.)
    mbar_arrive(full_of(slot) + 8);
    slot += kTeams;
    if (slot >= n_stages) {
      slot -= n_stages;
      parity ^= 1u;
    }
  }

  // ── the rows' final (max, sum) per team; the other teams hand their
  // accumulators to team 0 through the (now idle) stages.
  if (ttid % kRowThreads == 0) {
    ts.row_m[sm_row] = m_run;
    ts.row_l[sm_row] = l_run;
  }
  mbar_arrive(rows);
  mbar_wait(rows, 0);
  float row_m[2], row_l[2];
#pragma unroll
  for (uint32_t hi = 0; hi < 2; ++hi) {
    const uint32_t r = g + 8 * hi;
    float m = -INFINITY;
#pragma unroll
    for (uint32_t i = 0; i < kTeams; ++i) m = fmaxf(m, f.team[i].row_m[r]);
    row_m[hi] = m;
    row_l[hi] = 0.0f;
#pragma unroll
    for (uint32_t i = 0; i < kTeams; ++i) {
      const float mi = f.team[i].row_m[r];
      const float w = mi == -INFINITY ? 0.0f : exp2f(mi - m);
      row_l[hi] += f.team[i].row_l[r] * w;
      // This thread's accumulators of row r, reweighted to the common max.
      if (i == team)
#pragma unroll
        for (uint32_t k = 0; k < kOutGroups; ++k)
#pragma unroll
          for (uint32_t j = 0; j < kNtOut; ++j) {
            oacc[k][j][2 * hi] *= w;
            oacc[k][j][2 * hi + 1] *= w;
          }
    }
  }
  if constexpr (kTeams > 1) {
    static_assert(kTeams == 2, "one hand-over buffer");
    // [accumulator][team thread], below stage 0's flags and mbarriers
    // (NVFP4: the first half in stage 0's rows, the second in stage 1's).
    constexpr uint32_t kAccs = kOutGroups * kNtOut * 4, kHalf = kAccs / 2;
    static_assert(kOutGroups * 16 * kTeamThreads * sizeof(float) <= kTile * kPitchK);
    static_assert(kHalf * kTeamThreads * sizeof(float) <= contract::nvfp4_rows_bytes(kNvRow));
    float* handover = reinterpret_cast<float*>(stages);
    // NVFP4: accumulators from kHalf on in stage 1's rows (two teams: two
    // stages or more).
    float* const handover_hi = reinterpret_cast<float*>(stages + sbytes) - kHalf * kTeamThreads;
    if (team == 1) {
#pragma unroll
      for (uint32_t k = 0; k < kOutGroups; ++k)
#pragma unroll
        for (uint32_t j = 0; j < kNtOut; ++j)
#pragma unroll
          for (uint32_t e = 0; e < 4; ++e) {
            const uint32_t a = (k * kNtOut + j) * 4 + e;
            (!kNv || a < kHalf ? handover : handover_hi)[a * kTeamThreads + ttid] = oacc[k][j][e];
          }
      mbar_arrive(accs);
      return;
    }
    mbar_wait(accs, 0);
#pragma unroll
    for (uint32_t k = 0; k < kOutGroups; ++k)
#pragma unroll
      for (uint32_t j = 0; j < kNtOut; ++j)
#pragma unroll
        for (uint32_t e = 0; e < 4; ++e) {
          const uint32_t a = (k * kNtOut + j) * 4 + e;
          oacc[k][j][e] += (!kNv || a < kHalf ? handover : handover_hi)[a * kTeamThreads + ttid];
        }
  }
#pragma unroll
  for (uint32_t hi = 0; hi < 2; ++hi) {
    const uint32_t r = g + 8 * hi;
    if (r >= cta.hpc) continue;
    const uint32_t head = cta.head0 + r;
    const float m = row_m[hi], l = row_l[hi];
    const uint64_t out_row = uint64_t{cta.seq} * p.num_q_heads + head;
    float scale = p.v_scale;
    if (!p.split) {
      // The sink is one more logit in the denominator that carries no value.
      const float sink = p.sinks != nullptr ? p.sinks[head] * kLog2e : -INFINITY;
      const float mm = fmaxf(m, sink);
      const float total = mm == -INFINITY ? 0.0f
                                          : l * exp2f(m - mm) +
                                                (p.sinks != nullptr ? exp2f(sink - mm) : 0.0f);
      scale = total > 0.0f ? p.v_scale * exp2f(m - mm) / total : 0.0f;
    } else if (tw == 0 && t == 0) {
      float* ml = p.part_ml + (out_row * cta.splits + cta.split) * 2;
      ml[0] = m;
      ml[1] = l;
    }
#pragma unroll
    for (uint32_t k = 0; k < kOutGroups; ++k) {
      // Lane t holds columns 2t and 2t + 1 of each n-tile: 2 kNtOut dims
      // from d0, the first kNtOut from column 2t.
      constexpr uint32_t kDims = 2 * kNtOut;
      const uint32_t d0 = 8 * kNtOut * (tw + kTeamWarps * k) + kDims * t;
      float v[kDims];
#pragma unroll
      for (uint32_t j = 0; j < kNtOut; ++j) {
        v[j] = oacc[k][j][2 * hi] * scale;
        v[kNtOut + j] = oacc[k][j][2 * hi + 1] * scale;
      }
      if (!p.split) {
#pragma unroll
        for (uint32_t x = 0; x < kDims / 8; ++x) {
          uint4 packed;
          uint32_t* pw = &packed.x;
#pragma unroll
          for (uint32_t j = 0; j < 4; ++j)
            pw[j] = pack_bf16(v[8 * x + 2 * j], v[8 * x + 2 * j + 1]);
          *reinterpret_cast<uint4*>(p.o + out_row * kDv + d0 + 8 * x) = packed;
        }
      } else {
        float* dst = p.part_acc + (out_row * cta.splits + cta.split) * kDv + d0;
#pragma unroll
        for (uint32_t x = 0; x < kDims / 4; ++x)
          *reinterpret_cast<float4*>(dst + 4 * x) =
              make_float4(v[4 * x], v[4 * x + 1], v[4 * x + 2], v[4 * x + 3]);
      }
    }
  }
}

// The shapes the tiled kernel takes; the op checks the same before choosing it.
template <Format kFmt>
__device__ __forceinline__ bool shape_ok(const Params& p) {
  if (blockDim.x != kStagingThreads || p.num_kv_heads == 0 || p.num_q_heads % p.num_kv_heads != 0 ||
      p.block_size == 0 || p.kv_cache_dim != kDim || p.q_head_dim == 0 || p.q_head_dim % 16 != 0 ||
      p.q_head_dim > kDim || p.cache_stride % 16 != 0)
    return false;
  // NVFP4: data rows 16-byte aligned (288 bytes a row, blocks a multiple of
  // 16 apart), scale rows 4-byte aligned.
  if constexpr (kFmt == Format::kNvfp4) {
    if (p.data_section % 4 != 0) return false;
  }
  const uint32_t group = p.num_q_heads / p.num_kv_heads;
  return gridDim.x == p.num_kv_heads * ((group + kRows - 1) / kRows);
}

// Dynamic shared memory: the tiled kernel's layout (below), or the per-head
// decode's AttendScratch. The fp8 entry has no static shared memory, so the
// op may give the tiled kernel all the device allows.
extern __shared__ __align__(128) uint8_t smem[];

template <Format kFmt>
__device__ __forceinline__ void run(const Params& p) {
  if (!shape_ok<kFmt>(p)) return;
  // As many stages as the given shared memory holds, two teams where two
  // stages fit beside their state (the op passes what it chose).
  const uint32_t given = dynamic_smem_bytes(), sbytes = stage_bytes<kFmt>(p.v_cache == p.k_cache);
  auto stages_with = [&](uint32_t fixed) { return given < fixed ? 0u : (given - fixed) / sbytes; };
  const uint32_t two_teams = stages_with(sizeof(Fixed<2>));
  if (two_teams >= 2) return decode<kFmt, 2>(p, smem, two_teams);
  const uint32_t one_team = stages_with(sizeof(Fixed<1>));
  if (one_team >= 2) return decode<kFmt, 1>(p, smem, one_team);
}

}  // namespace tiled

// Decode over an NVFP4 cache: a block is block_stride_bytes long, its first
// data_section_bytes hold the E2M1 values two to a byte (even index in the
// low nibble), then one E4M3 scale per 16 consecutive values. Two
// geometries, told apart by the block, as for mla_paged_decode_fp8: the
// tiled one (block 320, grid (num_kv_heads * ceil(group / 16), num_seqs),
// the stages in dynamic shared memory) and one CTA per (query head,
// sequence) (block 256, grid (num_q_heads, num_seqs)) for shapes the tiled
// kernel does not take. The per-head scratch is static shared memory (4352
// bytes, part of every launch's share).
extern "C" __global__ void __launch_bounds__(tiled::kStagingThreads, 1)
    mla_paged_decode_nvfp4(const __nv_bfloat16* __restrict__ q, const uint8_t* __restrict__ k_cache,
                           const uint8_t* __restrict__ v_cache, __nv_bfloat16* __restrict__ o,
                           const int32_t* __restrict__ block_tables,
                           const int32_t* __restrict__ seq_lens, uint32_t max_blocks_per_seq,
                           uint32_t num_q_heads, uint32_t num_kv_heads, uint32_t q_head_dim,
                           uint32_t kv_cache_dim, uint32_t block_size, float inv_sqrt_d,
                           uint64_t block_stride_bytes, uint64_t data_section_bytes) {
  if (blockDim.x == tiled::kStagingThreads) {
    if (gridDim.z != 1) return;
    return tiled::run<tiled::Format::kNvfp4>(
        {q, k_cache, v_cache, block_tables, seq_lens, nullptr, nullptr, o, nullptr, nullptr,
         max_blocks_per_seq, num_q_heads, num_kv_heads, q_head_dim, kv_cache_dim, block_size,
         inv_sqrt_d, tiled::kE2m1Unit, tiled::kE2m1Unit, block_stride_bytes, 0, 0, false,
         data_section_bytes});
  }
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
  __shared__ AttendScratch scratch;
  attend(
      scratch, cta.q_row(q, num_q_heads, q_head_dim), q_head_dim, dv, cta.len - cta.t0, inv_sqrt_d,
      nullptr, cta.head, cta.o_row(o, num_q_heads, dv),
      [&](uint32_t u) { return block_of(u) >= 0; },
      [&](uint32_t u, uint32_t d) { return read(k_cache, u, d); },
      [&](uint32_t u, uint32_t d) { return read(v_cache, u, d); });
}

// Split-KV form of the tiled NVFP4 kernel, as mla_paged_decode_fp8_split is
// of the fp8 one: grid (num_kv_heads * ceil(group / 16), num_seqs,
// num_splits), dynamic shared memory as for the one-pass tiled launch. Split
// z takes whole 64-token tiles, ceil(tiles / num_splits) of them, and writes
// for each of its heads the unnormalised output to
// part_acc[seq][head][z][kv_cache_dim - 64] (f32) and (max, sum) of its
// base-2 scores to part_ml[seq][head][z][2]; mla_decode_combine merges them
// into o.
extern "C" __global__ void __launch_bounds__(tiled::kStagingThreads, 1)
    mla_paged_decode_nvfp4_split(
        const __nv_bfloat16* __restrict__ q, const uint8_t* __restrict__ k_cache,
        const uint8_t* __restrict__ v_cache, float* __restrict__ part_acc,
        float* __restrict__ part_ml, const int32_t* __restrict__ block_tables,
        const int32_t* __restrict__ seq_lens, uint32_t max_blocks_per_seq, uint32_t num_q_heads,
        uint32_t num_kv_heads, uint32_t q_head_dim, uint32_t kv_cache_dim, uint32_t block_size,
        float inv_sqrt_d, uint64_t block_stride_bytes, uint64_t data_section_bytes) {
  tiled::run<tiled::Format::kNvfp4>(
      {q, k_cache, v_cache, block_tables, seq_lens, nullptr, nullptr, nullptr, part_acc, part_ml,
       max_blocks_per_seq, num_q_heads, num_kv_heads, q_head_dim, kv_cache_dim, block_size,
       inv_sqrt_d, tiled::kE2m1Unit, tiled::kE2m1Unit, block_stride_bytes, 0, 0, true,
       data_section_bytes});
}

// Decode over an FP8 E4M3 cache (K = fp8 * k_scale, V = fp8 * v_scale,
// cache_stride bytes per block), with a sliding window, optional per-head
// sinks and an optional compressed pool of comp_block_count FP8 rows per
// sequence attended in addition. Two geometries, told apart by the block:
// the tiled one (block 320, grid (num_kv_heads * ceil(group / 16),
// num_seqs), the stages in dynamic shared memory) and one CTA per (query
// head, sequence) (block 256, grid (num_q_heads, num_seqs),
// sizeof(AttendScratch) of dynamic shared memory) for shapes the tiled
// kernel does not take.
extern "C" __global__ void __launch_bounds__(tiled::kStagingThreads, 1)
    mla_paged_decode_fp8(const __nv_bfloat16* __restrict__ q, const uint8_t* __restrict__ k_cache,
                         const uint8_t* __restrict__ v_cache, __nv_bfloat16* __restrict__ o,
                         const int32_t* __restrict__ block_tables,
                         const int32_t* __restrict__ seq_lens, uint32_t max_blocks_per_seq,
                         uint32_t num_q_heads, uint32_t num_kv_heads, uint32_t q_head_dim,
                         uint32_t kv_cache_dim, uint32_t block_size, float inv_sqrt_d,
                         float k_scale, float v_scale, uint64_t cache_stride,
                         uint32_t sliding_window, const float* __restrict__ sinks,
                         const uint8_t* __restrict__ comp_pool, uint32_t comp_block_count) {
  if (blockDim.x == tiled::kStagingThreads) {
    if (gridDim.z != 1) return;
    return tiled::run<tiled::Format::kFp8>(
        {q, k_cache, v_cache, block_tables, seq_lens, sinks, comp_pool, o, nullptr, nullptr,
         max_blocks_per_seq, num_q_heads, num_kv_heads, q_head_dim, kv_cache_dim, block_size,
         inv_sqrt_d, k_scale, v_scale, cache_stride, sliding_window, comp_block_count, false});
  }
  if (!decode_shape_ok(num_q_heads, num_kv_heads, q_head_dim, kv_cache_dim, block_size) ||
      tiled::dynamic_smem_bytes() < sizeof(AttendScratch))
    return;
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
      *reinterpret_cast<AttendScratch*>(tiled::smem), cta.q_row(q, num_q_heads, q_head_dim),
      q_head_dim, dv, n_comp + (cta.len - cta.t0), inv_sqrt_d, sinks, cta.head,
      cta.o_row(o, num_q_heads, dv), [&](uint32_t u) { return u < n_comp || block_of(u) >= 0; },
      [&](uint32_t u, uint32_t d) { return read(k_cache, u, d) * k_scale; },
      [&](uint32_t u, uint32_t d) { return read(v_cache, u, d) * v_scale; });
}

// Split-KV form of the tiled kernel: grid (num_kv_heads * ceil(group / 16),
// num_seqs, num_splits), dynamic shared memory as for the one-pass launch.
// Split z takes whole 64-token tiles, ceil(tiles / num_splits) of them, and
// writes for each of its heads the unnormalised output times v_scale to
// part_acc[seq][head][z][kv_cache_dim - 64] (f32) and (max, sum) of its
// base-2 scores to part_ml[seq][head][z][2]; mla_decode_combine merges them
// (and the sinks) into o.
extern "C" __global__ void __launch_bounds__(tiled::kStagingThreads, 1) mla_paged_decode_fp8_split(
    const __nv_bfloat16* __restrict__ q, const uint8_t* __restrict__ k_cache,
    const uint8_t* __restrict__ v_cache, float* __restrict__ part_acc, float* __restrict__ part_ml,
    const int32_t* __restrict__ block_tables, const int32_t* __restrict__ seq_lens,
    uint32_t max_blocks_per_seq, uint32_t num_q_heads, uint32_t num_kv_heads, uint32_t q_head_dim,
    uint32_t kv_cache_dim, uint32_t block_size, float inv_sqrt_d, float k_scale, float v_scale,
    uint64_t cache_stride, uint32_t sliding_window, const uint8_t* __restrict__ comp_pool,
    uint32_t comp_block_count) {
  tiled::run<tiled::Format::kFp8>(
      {q, k_cache, v_cache, block_tables, seq_lens, nullptr, comp_pool, nullptr, part_acc, part_ml,
       max_blocks_per_seq, num_q_heads, num_kv_heads, q_head_dim, kv_cache_dim, block_size,
       inv_sqrt_d, k_scale, v_scale, cache_stride, sliding_window, comp_block_count, true});
}

// o[seq][head] = (sum_z 2^(m_z - M) acc_z) / (sum_z 2^(m_z - M) l_z + 2^(sink - M))
// over the splits with l_z > 0, M the largest of their m_z and the sink
// (sinks[head] * log2(e); no term when sinks is null); zeros when the
// denominator is 0. Grid (num_q_heads, num_seqs), block 256.
extern "C" __global__ void __launch_bounds__(kThreads)
    mla_decode_combine(const float* __restrict__ part_acc, const float* __restrict__ part_ml,
                       __nv_bfloat16* __restrict__ o, const float* __restrict__ sinks,
                       uint32_t num_q_heads, uint32_t dv, uint32_t num_splits) {
  __shared__ float weight[kMaxSplits];
  __shared__ float inv_total;
  const uint32_t head = blockIdx.x, seq = blockIdx.y;
  if (head >= num_q_heads || num_splits == 0 || num_splits > kMaxSplits) return;
  const uint64_t row = uint64_t{seq} * num_q_heads + head;
  const float* ml = part_ml + row * num_splits * 2;
  if (threadIdx.x == 0) {
    const float sink = sinks != nullptr ? sinks[head] * tiled::kLog2e : -INFINITY;
    float mm = sink;
    for (uint32_t z = 0; z < num_splits; ++z)
      if (ml[2 * z + 1] > 0.0f) mm = fmaxf(mm, ml[2 * z]);
    float total = mm == -INFINITY || sinks == nullptr ? 0.0f : exp2f(sink - mm);
    for (uint32_t z = 0; z < num_splits; ++z) {
      const float w = ml[2 * z + 1] > 0.0f ? exp2f(ml[2 * z] - mm) : 0.0f;
      weight[z] = w;
      total += w * ml[2 * z + 1];
    }
    inv_total = total > 0.0f ? 1.0f / total : 0.0f;
  }
  __syncthreads();
  const float* acc = part_acc + row * num_splits * dv;
  for (uint32_t d = threadIdx.x; d < dv; d += blockDim.x) {
    float v = 0.0f;
    for (uint32_t z = 0; z < num_splits; ++z)
      if (weight[z] != 0.0f) v += weight[z] * acc[uint64_t{z} * dv + d];
    o[row * dv + d] = __float2bfloat16_rn(v * inv_total);
  }
}
