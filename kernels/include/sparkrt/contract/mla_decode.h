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

// k3_mla_maybe_rope_f32: grid ceil(heads / kRopeThreads), one thread per head.
inline constexpr uint32_t kRopeThreads = 128;
// k3_mla_sdpa_gate_f32: grid (heads), one warp per head; the kernel refuses
// any other block. A lane accumulates kDimsPerLane V dims per pass.
inline constexpr uint32_t kSdpaThreads = 32;
inline constexpr uint32_t kDimsPerLane = 8;

}  // namespace sparkrt::contract::mla_decode

#endif  // SPARKRT_CONTRACT_MLA_DECODE_H_
