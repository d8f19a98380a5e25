// The split-KV rule of the decode modules (docs/kernels.md, "Split-KV"):
// which tokens split z of n takes. One definition, read by C++17 (the CUDA
// sources, the references and the op wrappers) and by GLSL (the SPIR-V
// kernels, compiled by glslang, which defines VULKAN and GL_core_profile;
// SPARKRT_SPLIT_KV_GLSL below), so it is written in the subset the two
// share: `uint` and `uint64_t`, functional casts, and the result built by
// SPARKRT_SPLIT_KV_RANGE (an aggregate in C++, a constructor in GLSL).
#ifndef SPARKRT_CONTRACT_SPLIT_KV_H_
#define SPARKRT_CONTRACT_SPLIT_KV_H_

#if defined(VULKAN) && defined(GL_core_profile)
#define SPARKRT_SPLIT_KV_GLSL 1
#else
#define SPARKRT_SPLIT_KV_GLSL 0
#endif

#if SPARKRT_SPLIT_KV_GLSL
#define SPARKRT_SPLIT_KV_CONST const
#define SPARKRT_SPLIT_KV_FN
#define SPARKRT_SPLIT_KV_RANGE(t0, t1) TokenRange(t0, t1)
struct TokenRange {
  uint t0;
  uint t1;
};
#else
#include <cstdint>

#include "sparkrt/contract/host_device.h"

namespace sparkrt::contract::split_kv {
#define SPARKRT_SPLIT_KV_CONST inline constexpr
#define SPARKRT_SPLIT_KV_FN SPARKRT_HOST_DEVICE constexpr
#define SPARKRT_SPLIT_KV_RANGE(t0, t1) TokenRange{t0, t1}
using uint = uint32_t;
struct TokenRange {
  uint t0, t1;
};
#endif

// Split boundaries fall on multiples of this many tokens, counted from the
// window's start rounded down: a multiple of every decode kernel's tile, so
// that no two splits share a tile.
SPARKRT_SPLIT_KV_CONST uint kSplitAlign = 16u;

// The token range [t0, t1) of split z of n (n = 0: no split, the whole
// window) for a sequence of `len` cached tokens and a sliding window of
// `window` tokens (0: none). With a = the window's start rounded down to
// kSplitAlign and per = kSplitAlign * ceil((len - a) / (kSplitAlign * n)),
// split z takes [a + z * per, a + (z + 1) * per) clamped to the window;
// trailing splits may be empty. n < 2^16 (the grid's z), so nothing
// overflows.
SPARKRT_SPLIT_KV_FN TokenRange token_range(uint len, uint window, uint n, uint z) {
  uint t0 = (window > 0u && len > window) ? len - window : 0u;
  uint t1 = len;
  if (n > 0u) {
    const uint a = t0 / kSplitAlign * kSplitAlign;
    const uint grain = kSplitAlign * n;
    const uint64_t per = uint64_t((t1 - a + grain - 1) / grain) * kSplitAlign;
    const uint64_t b = a + per * z;
    const uint64_t e = b + per;
    t0 = b < t0 ? t0 : b < t1 ? uint(b) : t1;
    t1 = e < t1 ? uint(e) : t1;
  }
  return SPARKRT_SPLIT_KV_RANGE(t0, t1);
}

#if !SPARKRT_SPLIT_KV_GLSL
}  // namespace sparkrt::contract::split_kv
#endif
#undef SPARKRT_SPLIT_KV_CONST
#undef SPARKRT_SPLIT_KV_FN
#undef SPARKRT_SPLIT_KV_RANGE
#undef SPARKRT_SPLIT_KV_GLSL

#endif  // SPARKRT_CONTRACT_SPLIT_KV_H_
