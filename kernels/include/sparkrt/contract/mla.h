// The launch contract of kernel module `mla` (kernels/ptx/mla.cu): the
// multi-head latent attention (MLA) row, the blocks, and the shared-memory
// layout of the decode kernels, shared by the CUDA source, the reference and
// the op wrappers. Plain constants, C++17, no CUDA. Contracts and geometry in
// docs/kernels.md ("Module mla").
#ifndef SPARKRT_CONTRACT_MLA_H_
#define SPARKRT_CONTRACT_MLA_H_

#include <cstdint>

namespace sparkrt::contract::mla {

inline constexpr char kModule[] = "mla";

// The MLA cache row: 512 latent values (also V), then 64 rope values.
inline constexpr uint32_t kLatentDim = 512;
inline constexpr uint32_t kRopeDim = 64;
inline constexpr uint32_t kCacheDim = kLatentDim + kRopeDim;

// Block of every entry but mla_cache_assemble (whose block is its choice)
// and the tiled decode.
inline constexpr uint32_t kThreads = 256;
// Outputs of one mla_batched_gemv CTA: one per warp.
inline constexpr uint32_t kGemvOutputsPerCta = kThreads / 32;
// Decode limit on q_head_dim and kv_cache_dim.
inline constexpr uint32_t kMaxDim = 1024;
// mla_decode_combine gives each split's weight to one thread.
inline constexpr uint32_t kCombineMaxSplits = kThreads;

// The per-head decode: tokens scored per pass, and its dynamic shared memory
// (q as f32, one chunk of scores), passed at launch so that the entry has no
// static shared memory to subtract from the tiled kernel's share.
inline constexpr uint32_t kPerHeadChunk = 64;
inline constexpr uint32_t kPerHeadSharedBytes = (kMaxDim + kPerHeadChunk) * 4;

// The tiled FP8 decode (kv_cache_dim == kCacheDim): tiles of kTile tokens
// (a split takes whole tiles), up to kTiledRows query heads of one KV head
// per CTA, 8 consumer warps and kStagingWarps warps that only stage rows.
inline constexpr uint32_t kTile = 64;
inline constexpr uint32_t kTiledRows = 16;
inline constexpr uint32_t kStagingWarps = 2;
inline constexpr uint32_t kTiledThreads = kThreads + 32 * kStagingWarps;
// Score dims split over warps w % kQuarters.
inline constexpr uint32_t kQuarters = 4;
// Shared-memory pitches: staged rows padded by one 16-byte chunk (the 8 rows
// of a score fragment then start on distinct bank groups); score partials
// (floats) and probabilities (halves) padded for conflict-free accesses.
inline constexpr uint32_t kPitchK = kCacheDim + 16;
inline constexpr uint32_t kPitchV = kLatentDim + 16;  // when V is a separate pool
inline constexpr uint32_t kRedPitch = kTile + 8;
inline constexpr uint32_t kPPitch = kTile + 16;

// The tiled decode's dynamic shared memory: the fixed part (per team of
// consumer warps: score partials, probabilities, the tile's rescale and the
// rows' final max and sum; then the q scales), then per stage the tile's K
// rows (and V rows when V is a separate pool) and kFlagBytes of token flags
// and barriers. The kernel runs the layout the size implies.
inline constexpr uint32_t kTeamBytes =
    kQuarters * kTiledRows * kRedPitch * 4 + kTiledRows * kPPitch * 2 + 3 * kTiledRows * 4;
inline constexpr uint32_t kQScaleBytes = kTiledRows * 4;
inline constexpr uint32_t kFlagBytes = kTile + 32;
constexpr uint32_t tiled_fixed_bytes(uint32_t teams) { return teams * kTeamBytes + kQScaleBytes; }
constexpr uint32_t tiled_stage_bytes(bool separate_v) {
  return kTile * (kPitchK + (separate_v ? kPitchV : 0u)) + kFlagBytes;
}

}  // namespace sparkrt::contract::mla

#endif  // SPARKRT_CONTRACT_MLA_H_
