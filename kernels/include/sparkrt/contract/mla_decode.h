// The launch contract of kernel module `mla_decode` (kernels/ptx/mla_decode.cu),
// the per-token decode of Kimi K3 gated-NoPE MLA (defined in docs/kernels.md,
// "Module mla_decode"): what the CUDA source, the reference and the op
// wrappers share. Plain constants, C++17, no CUDA.
#ifndef SPARKRT_CONTRACT_MLA_DECODE_H_
#define SPARKRT_CONTRACT_MLA_DECODE_H_

#include <cstdint>

namespace sparkrt::contract::mla_decode {

inline constexpr char kModule[] = "mla_decode";
inline constexpr char kRopeEntry[] = "k3_mla_maybe_rope_f32";
inline constexpr char kSdpaEntry[] = "k3_mla_sdpa_gate_f32";
inline constexpr char kSplitEntry[] = "k3_mla_sdpa_split_f32";
inline constexpr char kCombineEntry[] = "k3_mla_sdpa_combine_f32";

// k3_mla_maybe_rope_f32: grid ceil(heads / kRopeThreads), one thread per head.
inline constexpr uint32_t kRopeThreads = 128;
// k3_mla_sdpa_gate_f32: grid (heads), one warp per head; the kernel refuses
// any other block. A lane accumulates kDimsPerLane V dims per pass.
inline constexpr uint32_t kSdpaThreads = 32;
inline constexpr uint32_t kDimsPerLane = 8;

// Split-KV attention, the same result over more CTAs:
// k3_mla_sdpa_split_f32: grid (heads, num_splits), block kSplitThreads;
// split z of head h takes the tokens split_kv::token_range(seq_len, 0,
// num_splits, z) and writes its partials: part_acc[h][z][dv] (f32, V
// weighted by 2^(s - m)) and part_ml[h][z] = (m, l), m the largest score in
// base 2 (q . k * log2(e) / sqrt(dq); -inf for no token), l the sum of
// 2^(s - m) (0 for no token). dq is at most kSplitMaxDq (q is staged in
// shared memory). k3_mla_sdpa_combine_f32: grid (heads), block
// kCombineThreads, merges a head's num_splits <= kMaxSplits partials and
// applies the gate.
inline constexpr uint32_t kSplitThreads = 256;
inline constexpr uint32_t kSplitMaxDq = 1024;
inline constexpr uint32_t kCombineThreads = 128;
inline constexpr uint32_t kMaxSplits = kCombineThreads;  // one split's weight per thread

}  // namespace sparkrt::contract::mla_decode

#endif  // SPARKRT_CONTRACT_MLA_DECODE_H_
