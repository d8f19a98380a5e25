// The launch contract of kernel module `turbo_paged_attention`
// (kernels/ptx/turbo_paged_attention.cu): decode attention over a BF16 K pool
// and a TurboQuant V pool (sparkrt/contract/turbo_kv_cache.h), shared by the
// CUDA source, the reference and the op wrappers. C++17. Contracts in
// docs/kernels.md ("Module turbo_paged_attention").
#ifndef SPARKRT_CONTRACT_TURBO_PAGED_ATTENTION_H_
#define SPARKRT_CONTRACT_TURBO_PAGED_ATTENTION_H_

#include <cstdint>

#include "sparkrt/contract/split_kv.h"
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
// Splits take their tokens by the split-KV rule (sparkrt/contract/split_kv.h)
// that the bf16 decode follows, whose combine kernel
// (paged_attention.paged_decode_attn_combine) merges the split entries'
// partials.
using split_kv::token_range;
using split_kv::TokenRange;

}  // namespace sparkrt::contract::turbo_paged_attention

#endif  // SPARKRT_CONTRACT_TURBO_PAGED_ATTENTION_H_
