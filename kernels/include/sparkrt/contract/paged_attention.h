// The launch contract of kernel module `paged_attention`
// (kernels/ptx/paged_attention.cu): what the CUDA source, the reference and
// the op wrappers share, so that a build switch that changes a tile changes
// the host's shared-memory sizing with it. Plain constants, C++17, no CUDA.
// Contracts and geometry in docs/kernels.md ("Module paged_attention").
#ifndef SPARKRT_CONTRACT_PAGED_ATTENTION_H_
#define SPARKRT_CONTRACT_PAGED_ATTENTION_H_

#include <cstdint>

#include "sparkrt/contract/split_kv.h"

// Build-time tuning switches; the defaults are the versions measured best on
// the H200 (docs/benchmark-notes.md, "Paged decode attention"). Define them
// for the kernels and the host alike (CMAKE_CXX_FLAGS and the nvcc flags).
//
// 8-token groups per warp iteration for head_dim 65..128, per cache dtype
// (2: 16 tokens, 1: 8). 1 fits the registers of two resident CTAs per
// multiprocessor without spilling; 2 spills for bf16.
#ifndef SPARKRT_PA_GROUPS_D128_BF16
#define SPARKRT_PA_GROUPS_D128_BF16 1
#endif
#ifndef SPARKRT_PA_GROUPS_D128_FP8
#define SPARKRT_PA_GROUPS_D128_FP8 1
#endif

namespace sparkrt::contract::paged_attention {

inline constexpr char kModule[] = "paged_attention";

// Block of every entry: 8 warps.
inline constexpr uint32_t kThreads = 256;
inline constexpr uint32_t kWarps = kThreads / 32;
// Query heads of one KV head a decode CTA serves (grid.x = num_q_heads /
// heads per CTA): the rows of the tensor-core tiles.
inline constexpr uint32_t kMaxHeadsPerCta = 8;
// head_dim is a multiple of kHeadDimAlign (one 16-byte piece of a bf16 row
// per lane) and at most kMaxHeadDim.
inline constexpr uint32_t kHeadDimAlign = 8;
inline constexpr uint32_t kMaxHeadDim = 256;
// Splits take their tokens by the split-KV rule (sparkrt/contract/split_kv.h),
// whose kSplitAlign is a multiple of the tile at every head_dim.
using split_kv::kSplitAlign;
using split_kv::token_range;
using split_kv::TokenRange;
// paged_decode_attn_combine gives each split's weight to one thread.
inline constexpr uint32_t kCombineMaxSplits = kThreads;
// The decode entries' static shared memory stays within this budget (the
// kernel asserts it), which the host subtracts when it sizes the staging.
inline constexpr uint32_t kStaticSmemBudget = 16 * 1024;

// 8-token groups of a warp iteration: 2 up to head_dim 64, the switch of the
// cache dtype up to 128, 1 above.
inline constexpr uint32_t kTileGroupsD64 = 2;
inline constexpr uint32_t kTileGroupsD128Bf16 = SPARKRT_PA_GROUPS_D128_BF16;
inline constexpr uint32_t kTileGroupsD128Fp8 = SPARKRT_PA_GROUPS_D128_FP8;
inline constexpr uint32_t kTileGroupsD256 = 1;
static_assert(kTileGroupsD128Bf16 == 1 || kTileGroupsD128Bf16 == 2, "1 or 2 groups");
static_assert(kTileGroupsD128Fp8 == 1 || kTileGroupsD128Fp8 == 2, "1 or 2 groups");

// Tokens of a warp iteration for a cache element of `elem_bytes` (2: bf16,
// 1: fp8 E4M3).
constexpr uint32_t tile_tokens(uint32_t head_dim, uint32_t elem_bytes) {
  return 8 * (head_dim <= 64    ? kTileGroupsD64
              : head_dim <= 128 ? (elem_bytes == 1 ? kTileGroupsD128Fp8 : kTileGroupsD128Bf16)
                                : kTileGroupsD256);
}

static_assert(kSplitAlign % tile_tokens(64, 1) == 0 && kSplitAlign % tile_tokens(128, 1) == 0 &&
                  kSplitAlign % tile_tokens(128, 2) == 0,
              "splits share no tile");

// Staging: each warp copies its next tile's K and V rows into one of
// kStages stages of its own with cp.async while it computes the current one
// (three or four stages measured no faster on the H200, and they take L1).
// Staged rows are padded to whole 128-byte lines.
inline constexpr uint32_t kStages = 2;
constexpr uint32_t staged_row_pitch(uint32_t head_dim, uint32_t elem_bytes) {
  return (head_dim * elem_bytes + 127) / 128 * 128;
}
// One stage: a tile's K rows, then its V rows.
constexpr uint32_t stage_bytes(uint32_t head_dim, uint32_t elem_bytes) {
  return 2 * tile_tokens(head_dim, elem_bytes) * staged_row_pitch(head_dim, elem_bytes);
}
// The dynamic shared memory a launch gives for the kernel to stage (less:
// rows go straight into registers).
constexpr uint32_t staging_bytes(uint32_t head_dim, uint32_t elem_bytes) {
  return kWarps * kStages * stage_bytes(head_dim, elem_bytes);
}

}  // namespace sparkrt::contract::paged_attention

#endif  // SPARKRT_CONTRACT_PAGED_ATTENTION_H_
