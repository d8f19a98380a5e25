// The launch contract of kernel module `turbo_paged_attention`
// (kernels/ptx/turbo_paged_attention.cu): decode attention over a BF16 K pool
// and a TurboQuant V pool (sparkrt/contract/turbo_kv_cache.h), shared by the
// CUDA source, the reference and the op wrappers. C++17. Contracts in
// docs/kernels.md ("Module turbo_paged_attention").
#ifndef SPARKRT_CONTRACT_TURBO_PAGED_ATTENTION_H_
#define SPARKRT_CONTRACT_TURBO_PAGED_ATTENTION_H_

#include <cstdint>

#include "sparkrt/contract/turbo_kv_cache.h"

namespace sparkrt::contract::turbo_paged_attention {

inline constexpr char kModule[] = "turbo_paged_attention";

// Block of every entry: 8 warps; grid (num_q_heads / heads per CTA,
// num_seqs[, num_splits]).
inline constexpr uint32_t kThreads = 256;
inline constexpr uint32_t kWarps = kThreads / 32;
// Query heads of one KV head a CTA serves.
inline constexpr uint32_t kMaxHeadsPerCta = 8;
// head_dim 64, 128 or 256: each of a warp's 32 lanes owns head_dim / 32
// consecutive V dims, which then lie in one 16-value group.
inline constexpr uint32_t kMaxHeadDim = 256;
SPARKRT_HOST_DEVICE constexpr bool valid_head_dim(uint32_t d) {
  return d == 64 || d == 128 || d == 256;
}
// Split boundaries fall on multiples of this many tokens, as for the bf16
// decode, whose combine kernel (paged_attention.paged_decode_attn_combine)
// merges the split entries' partials.
inline constexpr uint32_t kSplitAlign = 16;

// The token range [t0, t1) of split z of n (n = 0: no split) for a sequence of
// `len` cached tokens and a sliding window (0: none): the window's tokens,
// cut on a grid of kSplitAlign tokens from the range's start rounded down.
struct TokenRange {
  uint32_t t0, t1;
};
SPARKRT_HOST_DEVICE constexpr TokenRange token_range(uint32_t len, uint32_t window, uint32_t n,
                                                     uint32_t z) {
  uint32_t t0 = (window > 0 && len > window) ? len - window : 0, t1 = len;
  if (n > 0) {
    const uint32_t a = t0 / kSplitAlign * kSplitAlign;
    const uint32_t grain = kSplitAlign * n;
    const uint64_t per = uint64_t{(t1 - a + grain - 1) / grain} * kSplitAlign;
    const uint64_t b = a + per * z, e = b + per;
    t0 = b < t0 ? t0 : b < t1 ? uint32_t(b) : t1;
    t1 = e < t1 ? uint32_t(e) : t1;
  }
  return {t0, t1};
}

}  // namespace sparkrt::contract::turbo_paged_attention

#endif  // SPARKRT_CONTRACT_TURBO_PAGED_ATTENTION_H_
