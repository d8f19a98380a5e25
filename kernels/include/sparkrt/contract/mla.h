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

// The per-head decode: tokens scored per pass, and its scratch (q as f32,
// one chunk of scores): the FP8 entry's dynamic shared memory, passed at
// launch so that the entry has no static shared memory to subtract from the
// tiled kernel's share; the NVFP4 entry's static shared memory.
inline constexpr uint32_t kPerHeadChunk = 64;
inline constexpr uint32_t kPerHeadSharedBytes = (kMaxDim + kPerHeadChunk) * 4;

// The tiled decode, FP8 or NVFP4 (kv_cache_dim == kCacheDim): tiles of kTile tokens
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

// The tiled decode over an NVFP4 cache stages, per token, its row's E2M1
// bytes (two values a byte: 288 for K, the first 256 for a separate V pool)
// and its scale bytes (36 for K; a separate V pool's 32, padded to 36). A
// staged row r starts kNvfp4RowSkew * (r / 4) bytes past r times its length,
// so that the bytes the products read at once fall on distinct banks. A
// stage: the K rows, the V rows (separate pool), the K scales, the V scales
// (separate pool), then kFlagBytes of token flags and barriers.
inline constexpr uint32_t kNvfp4RowBytes = kCacheDim / 2;
inline constexpr uint32_t kNvfp4VRowBytes = kLatentDim / 2;
inline constexpr uint32_t kNvfp4RowSkew = 32;
inline constexpr uint32_t kNvfp4ScalePitch = kCacheDim / 16;
constexpr uint32_t nvfp4_rows_bytes(uint32_t row_bytes) {
  return kTile * row_bytes + (kTile / 4 - 1) * kNvfp4RowSkew;
}
constexpr uint32_t tiled_nvfp4_stage_bytes(bool separate_v) {
  return nvfp4_rows_bytes(kNvfp4RowBytes) + kTile * kNvfp4ScalePitch +
         (separate_v ? nvfp4_rows_bytes(kNvfp4VRowBytes) + kTile * kNvfp4ScalePitch : 0u) +
         kFlagBytes;
}
// The NVFP4 one-pass entry's static scratch (kPerHeadSharedBytes) counts
// against the same per-block limit as a tiled launch's dynamic shared memory.

}  // namespace sparkrt::contract::mla

#endif  // SPARKRT_CONTRACT_MLA_H_
