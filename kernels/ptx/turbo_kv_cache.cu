// turbo_kv_cache: writes into a TurboQuant cache (K raw BF16, V 2/3/4-bit
// Lloyd-Max with an FP8 E4M3 scale per 16 values) and the normalized
// Walsh-Hadamard rotation that V goes through before it. Format and contracts
// in docs/kernels.md ("TurboQuant V cache", "Module turbo_kv_cache").
//
// A write is one CTA per token. Its threads take lanes of the row, a lane
// being 8 values, in passes of 256 lanes: lane l copies the K row's 16-byte
// unit l and quantizes V's values 8l .. 8l + 7, so that each pair of lanes
// holds one 16-value group; both loads are issued before the slot is known.
// A row of 1024 values is 128 lanes, and the other 4 warps return at once:
// the work of a group is fixed, and the fewer warps carry it, the fewer
// instructions each token costs. The pair computes the contract's steps
// (sparkrt/contract/turbo_kv_cache.h) in forms that give the same bits: the
// absmax by one xor shuffle; x / absmax as a correctly rounded division by
// the group's reciprocal (contract::divide's steps,
// sparkrt/contract/division.h); the nearest centroid from a cell of the
// codebook's range and shuffles of a lane table (below); the sums of squares
// chained in index order, the second lane continuing the first's fused
// multiply-adds, so that it ends with the sums and stores the scale. Each
// lane stores its 8 indices whole (4, 3 or 2 bytes).
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "sparkrt/contract/division.h"
#include "sparkrt/contract/turbo_kv_cache.h"
#include "sparkrt_kernel_utils.cuh"

namespace {

namespace contract = sparkrt::contract::turbo_kv_cache;
namespace division = sparkrt::contract;
constexpr uint32_t kThreads = contract::kThreads;
constexpr uint32_t kGroup = contract::kGroup;
constexpr uint32_t kPerLane = 8;  // V values a lane quantizes: half a group
constexpr uint32_t kFull = 0xffffffffu;

__device__ __forceinline__ bool aligned(const void* p, uintptr_t bytes) {
  return (reinterpret_cast<uintptr_t>(p) & (bytes - 1)) == 0;
}

// The contract's nearest_index(kBits, y) for y within the codebook's range
// [-outer, outer], without walking all the bounds. The walk counts the
// bounds at or below y. The range is cut into cells a quarter wide,
// cell(v) = floor(4 v + kOffset), each holding at most one bound (the bounds
// are more than a quarter apart); then the bounds of lower cells are below
// y, those of higher cells above, and the count is the cell's base (the
// bounds below it) plus whether y reaches the cell's own bound. A lane of
// each warp holds one cell's entry, and the centroid of one index, which
// the others read by shuffles: a cell, a shuffle each for base and bound, a
// comparison, and a shuffle for the centroid. The bounds are
// nearest_index's own f32 expression, so the index is the same.
template <uint32_t kBits>
struct Cells {
  static constexpr uint32_t kSize = contract::codebook_size(kBits);
  static constexpr float kOuter = contract::centroid(kBits, kSize - 1);
  static constexpr float bound(uint32_t j) {
    return 0.5f * (contract::centroid(kBits, j) + contract::centroid(kBits, j + 1));
  }
  // floor(4 v + kOffset), positive over the range, in double (exact).
  static constexpr uint32_t kOffset = uint32_t(4.0 * double(kOuter)) + 1;
  static constexpr uint32_t cell(float v) { return uint32_t(4.0 * double(v) + kOffset); }
  static constexpr uint32_t kCells = cell(kOuter) + 1;
  static constexpr uint32_t base(uint32_t c) {
    uint32_t n = 0;
    for (uint32_t j = 0; j + 1 < kSize; ++j) n += cell(bound(j)) < c ? 1 : 0;
    return n;
  }
  static constexpr float cell_bound(uint32_t c) {
    for (uint32_t j = 0; j + 1 < kSize; ++j)
      if (cell(bound(j)) == c) return bound(j);
    return __builtin_huge_valf();  // no bound here: never reached
  }
  static constexpr bool one_bound_a_cell() {
    for (uint32_t j = 0; j + 2 < kSize; ++j)
      if (cell(bound(j)) == cell(bound(j + 1))) return false;
    return 4.0 * double(-kOuter) + kOffset > 0.0 && kCells <= 32;
  }
};
static_assert(Cells<3>::one_bound_a_cell() && Cells<4>::one_bound_a_cell());

// Lane l's entries: cell l's bound and base, and centroid l.
struct alignas(16) CellEntry {
  float bound;
  uint32_t base;
  float centroid;
  uint32_t unused;
};
template <uint32_t kBits>
constexpr CellEntry cell_entry(uint32_t l) {
  using C = Cells<kBits>;
  return {C::cell_bound(l), C::base(l), l < C::kSize ? contract::centroid(kBits, l) : 0.0f, 0};
}
#define SPARKRT_CELLS8(b, l)                                                               \
  cell_entry<b>(l), cell_entry<b>(l + 1), cell_entry<b>(l + 2), cell_entry<b>(l + 3),      \
      cell_entry<b>(l + 4), cell_entry<b>(l + 5), cell_entry<b>(l + 6), cell_entry<b>(l + 7)
#define SPARKRT_CELLS32(b) \
  {SPARKRT_CELLS8(b, 0), SPARKRT_CELLS8(b, 8), SPARKRT_CELLS8(b, 16), SPARKRT_CELLS8(b, 24)}
__device__ const CellEntry kCells3[32] = SPARKRT_CELLS32(3);
__device__ const CellEntry kCells4[32] = SPARKRT_CELLS32(4);
#undef SPARKRT_CELLS32
#undef SPARKRT_CELLS8

// Index and centroid of y in [-outer, outer] (-0 included): 2-bit by its
// three bounds directly, else through the lane's entry e.
template <uint32_t kBits>
__device__ __forceinline__ uint32_t nearest(float y, const CellEntry& e, float& centroid) {
  if constexpr (kBits == 2) {
    constexpr float b0 = 0.5f * (contract::centroid(2, 0) + contract::centroid(2, 1));
    constexpr float b1 = 0.5f * (contract::centroid(2, 1) + contract::centroid(2, 2));
    constexpr float b2 = 0.5f * (contract::centroid(2, 2) + contract::centroid(2, 3));
    const uint32_t k = (y >= b0 ? 1u : 0u) + (y >= b1 ? 1u : 0u) + (y >= b2 ? 1u : 0u);
    // Only the square is used, so the magnitude does.
    centroid = k == 0 || k == 3 ? contract::centroid(2, 3) : contract::centroid(2, 2);
    return k;
  } else {
    using C = Cells<kBits>;
    // 4y + kOffset + 2^23 is in [2^23, 2^24), where floats are the integers:
    // rounded toward zero it is 2^23 + cell, whose low 5 bits (all that a
    // shuffle reads of a lane number) are the cell.
    const uint32_t cell = __float_as_uint(__fmaf_rz(y, 4.0f, float(C::kOffset) + 0x1p23f));
    const uint32_t k = uint32_t(__shfl_sync(kFull, e.base, cell)) +
                       (y >= __shfl_sync(kFull, e.bound, cell) ? 1u : 0u);
    centroid = __shfl_sync(kFull, e.centroid, k);
    return k;
  }
}

// Stores the low `bytes` (2 to 4) bytes of v at p, as wide as p's
// alignment allows.
__device__ __forceinline__ void store_bytes(uint8_t* p, uint32_t v, uint32_t bytes) {
  if (bytes == 4 && aligned(p, 4)) {
    *reinterpret_cast<uint32_t*>(p) = v;
  } else if (bytes == 3 || !aligned(p, 2)) {
    const uint32_t head = aligned(p, 2) ? 0 : 1;  // an odd start: one byte first
    if (head != 0) p[0] = uint8_t(v);
    for (uint32_t b = head; b + 1 < bytes; b += 2)
      *reinterpret_cast<uint16_t*>(p + b) = uint16_t(v >> (8 * b));
    if ((bytes - head) % 2 != 0) p[bytes - 1] = uint8_t(v >> (8 * (bytes - 1)));
  } else {
    for (uint32_t b = 0; b < bytes; b += 2)
      *reinterpret_cast<uint16_t*>(p + b) = uint16_t(v >> (8 * b));
  }
}

template <uint32_t kBits>
__device__ __forceinline__ void write_token(
    const __nv_bfloat16* __restrict__ key, const __nv_bfloat16* __restrict__ value,
    uint8_t* __restrict__ k_cache, uint8_t* __restrict__ v_cache,
    const int64_t* __restrict__ slot_mapping, uint32_t num_kv_heads, uint32_t head_dim,
    uint32_t block_size, uint32_t key_stride, uint32_t value_stride, uint64_t k_block_stride_bytes,
    uint64_t v_block_stride_bytes, uint64_t v_data_section_bytes) {
  if (head_dim == 0 || head_dim % kGroup != 0 || block_size == 0) return;
  const uint32_t t = blockIdx.x;
  const int64_t slot = slot_mapping[t];
  const uint32_t row = num_kv_heads * head_dim, lanes = row / kPerLane;  // pairs: row % 16 == 0
  const __nv_bfloat16* k_src = key + uint64_t{t} * key_stride;
  const __nv_bfloat16* v_src = value + uint64_t{t} * value_stride;
  // K moves 16 bytes a lane where source and blocks allow it (the row's
  // offset in a block, off * row * 2, is a multiple of 32), else after the
  // passes, 2 bytes at a time by every thread.
  const bool k_vector =
      aligned(k_src, 16) && aligned(k_cache, 16) && k_block_stride_bytes % 16 == 0;
  if (k_vector && (threadIdx.x & ~31u) >= lanes) return;  // a warp with no lane in any pass
  const bool v_vector = aligned(v_src, 16);
  auto load_k = [&](uint32_t l) {
    return k_vector && l < lanes ? __ldg(reinterpret_cast<const uint4*>(k_src) + l) : uint4{};
  };
  auto load_v = [&](uint32_t l) {
    if (l >= lanes) return uint4{};
    if (v_vector) return __ldg(reinterpret_cast<const uint4*>(v_src) + l);
    const uint16_t* h = reinterpret_cast<const uint16_t*>(v_src) + kPerLane * l;
    return make_uint4(h[0] | uint32_t{h[1]} << 16, h[2] | uint32_t{h[3]} << 16,
                      h[4] | uint32_t{h[5]} << 16, h[6] | uint32_t{h[7]} << 16);
  };
  uint4 kw = load_k(threadIdx.x), vw = load_v(threadIdx.x);
  if (slot < 0) return;  // the whole CTA: every lane is still there for the shuffles
  uint64_t block, off;
  if ((block_size & (block_size - 1)) == 0) {  // the usual block sizes: a shift and a mask
    block = uint64_t(slot) >> (__ffs(block_size) - 1);
    off = uint64_t(slot) & (block_size - 1);
  } else {
    block = uint64_t(slot) / block_size;
    off = uint64_t(slot) % block_size;
  }
  uint8_t* k_dst = k_cache + block * k_block_stride_bytes + off * row * 2;
  uint8_t* v_block = v_cache + block * v_block_stride_bytes;
  uint8_t* data = v_block + off * (uint64_t{row} * kBits / 8);
  __nv_fp8_storage_t* scales =
      reinterpret_cast<__nv_fp8_storage_t*>(v_block + v_data_section_bytes + off * (row / kGroup));
  const uint32_t sub = threadIdx.x % 2;  // the lane's half of its group
  const CellEntry cells = kBits == 2   ? CellEntry{}
                          : kBits == 3 ? kCells3[threadIdx.x % 32]
                                       : kCells4[threadIdx.x % 32];
  constexpr float outer = contract::centroid(kBits, contract::codebook_size(kBits) - 1);
  for (uint32_t base = 0;;) {
    const uint32_t l = base + threadIdx.x;
    const bool on = l < lanes;  // the same for the pair
    if (k_vector && on) reinterpret_cast<uint4*>(k_dst)[l] = kw;

    // Value i of the lane, from the bf16 words (converted where used, so
    // that only the words stay live).
    const uint32_t w[4] = {vw.x, vw.y, vw.z, vw.w};
    auto x = [&w](uint32_t i) {
      return __uint_as_float(i % 2 == 0 ? w[i / 2] << 16 : w[i / 2] & 0xffff0000u);
    };
    // The sums of squares in index order: the second lane continues, in a
    // second round, the chain the first ended in the first.
    auto chain = [](auto v) {
      float acc = 0.0f;
#pragma unroll
      for (uint32_t r = 0; r < 2; ++r) {
        if (r != 0) acc = __shfl_up_sync(kFull, acc, 1, 2);
#pragma unroll
        for (uint32_t i = 0; i < kPerLane; ++i) acc = contract::fma_step(v(i), v(i), acc);
      }
      return acc;
    };
    const float x2 = chain(x);
    // fmaxf passes over NaN; the 0 keeps an all-NaN group at 0, as the
    // contract's loop does.
    float absmax = 0.0f;
#pragma unroll
    for (uint32_t i = 0; i < kPerLane; i += 2)
      absmax = fmaxf(absmax, fmaxf(fabsf(x(i)), fabsf(x(i + 1))));
    absmax = fmaxf(absmax, __shfl_xor_sync(kFull, absmax, 1));

    // y = x / absmax * outer, the division through the group's reciprocal.
    // Where absmax and |x| are in the reciprocal range (x = 0 too: a zero of
    // either sign gives the same index) the steps are x / absmax; elsewhere
    // (absmax 0, subnormal or huge, x tiny or NaN) the lane takes the
    // contract's own functions.
    const division::Divisor d = division::make_divisor(absmax);
    bool fast = d.in_range;
    uint32_t field = 0;  // this lane's indices, kBits each, value 0 lowest
    float c[kPerLane];
#pragma unroll
    for (uint32_t i = 0; i < kPerLane; ++i) {
      fast &= (fabsf(x(i)) >= division::kMinMagnitude) | (x(i) == 0.0f);
      const float y = division::ieee_mul(division::reciprocal_quotient(d, x(i)), outer);
      field |= nearest<kBits>(y, cells, c[i]) << (i * kBits);
    }
    if (!fast) {
      field = 0;
#pragma unroll
      for (uint32_t i = 0; i < kPerLane; ++i) {
        const uint32_t k =
            contract::nearest_index(kBits, contract::scaled_value(kBits, x(i), absmax));
        field |= k << (i * kBits);
        c[i] = contract::centroid(kBits, k);
      }
    }
    const float c2 = chain([&c](uint32_t i) { return c[i]; });

    const uint32_t g = l / 2;
    if (on) store_bytes(data + g * (kGroup * kBits / 8) + sub * kBits, field, kBits);
    if (on && sub == 1)
      scales[g] = __nv_cvt_float_to_fp8(contract::group_scale(kBits, x2, c2, absmax),
                                        __NV_SATFINITE, __NV_E4M3);

    base += kThreads;
    if (base >= lanes) break;
    kw = load_k(base + threadIdx.x);
    vw = load_v(base + threadIdx.x);
  }
  if (!k_vector) {
    __nv_bfloat16* dst = reinterpret_cast<__nv_bfloat16*>(k_dst);
    for (uint32_t i = threadIdx.x; i < row; i += kThreads) dst[i] = k_src[i];
  }
}

}  // namespace

// Writes token blockIdx.x's K row raw and its V row quantized into its slot
// (a negative slot skips the token). Grid (num_tokens), block 256.
#define SPARKRT_TURBO_WRITE(bits)                                                                \
  extern "C" __global__ void __launch_bounds__(kThreads)                                        \
      reshape_and_cache_flash_bf16k_turbo##bits##v(                                              \
          const __nv_bfloat16* __restrict__ key, const __nv_bfloat16* __restrict__ value,        \
          uint8_t* __restrict__ k_cache, uint8_t* __restrict__ v_cache,                          \
          const int64_t* __restrict__ slot_mapping, uint32_t num_kv_heads, uint32_t head_dim,    \
          uint32_t block_size, uint32_t key_stride, uint32_t value_stride,                       \
          uint64_t k_block_stride_bytes, uint64_t v_block_stride_bytes,                          \
          uint64_t v_data_section_bytes) {                                                       \
    sparkrt_kernels::dependent_launch_sync();                                                    \
    write_token<bits>(key, value, k_cache, v_cache, slot_mapping, num_kv_heads, head_dim,        \
                      block_size, key_stride, value_stride, k_block_stride_bytes,                \
                      v_block_stride_bytes, v_data_section_bytes);                               \
  }
SPARKRT_TURBO_WRITE(2)
SPARKRT_TURBO_WRITE(3)
SPARKRT_TURBO_WRITE(4)
#undef SPARKRT_TURBO_WRITE

// out[t][h] = H x[t][h] / sqrt(head_dim) for head h = blockIdx.y of token
// t = blockIdx.x: the normalized Walsh-Hadamard transform (Sylvester order),
// which is its own inverse. In f32, butterflies of stride 1, 2, 4, ..., then
// one multiply by 1 / sqrt(head_dim) and one bf16 rounding. `in` may equal
// `out`. Grid (num_tokens, num_heads), block 256.
extern "C" __global__ void __launch_bounds__(kThreads)
    hadamard_transform_bf16(const __nv_bfloat16* in, __nv_bfloat16* out, uint32_t head_dim,
                            uint32_t in_stride, uint32_t out_stride) {
  sparkrt_kernels::dependent_launch_sync();
  __shared__ float x[contract::kMaxRotationDim];
  const uint32_t d = head_dim;
  if (d < contract::kMinRotationDim || d > contract::kMaxRotationDim || (d & (d - 1)) != 0) return;
  const __nv_bfloat16* src = in + uint64_t{blockIdx.x} * in_stride + uint64_t{blockIdx.y} * d;
  for (uint32_t i = threadIdx.x; i < d; i += kThreads) x[i] = __bfloat162float(src[i]);
  __syncthreads();
  for (uint32_t h = 1; h < d; h *= 2) {
    for (uint32_t p = threadIdx.x; p < d / 2; p += kThreads) {
      const uint32_t i = (p / h) * 2 * h + p % h;
      const float a = x[i], b = x[i + h];
      x[i] = a + b;
      x[i + h] = a - b;
    }
    __syncthreads();
  }
  const float scale = __fdiv_rn(1.0f, __fsqrt_rn(float(d)));
  __nv_bfloat16* dst = out + uint64_t{blockIdx.x} * out_stride + uint64_t{blockIdx.y} * d;
  for (uint32_t i = threadIdx.x; i < d; i += kThreads) dst[i] = __float2bfloat16_rn(x[i] * scale);
}
