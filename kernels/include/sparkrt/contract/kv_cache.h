// The launch contract of kernel module `kv_cache` (kernels/ptx/kv_cache.cu):
// what the CUDA source, the reference and the op wrappers share. Plain
// constants, C++17, no CUDA: nvcc, the host compiler and applications read
// the same definitions. Contracts in docs/kernels.md ("Module kv_cache").
#ifndef SPARKRT_CONTRACT_KV_CACHE_H_
#define SPARKRT_CONTRACT_KV_CACHE_H_

#include <cstdint>

namespace sparkrt::contract::kv_cache {

inline constexpr char kModule[] = "kv_cache";

// Block of the copy-style writers (reshape_and_cache*) and of
// fill_slots_from_block_table, whose grid is ceil(count / kCopyThreads).
// The fused K path's block is head_dim: one thread per element of a head.
inline constexpr uint32_t kCopyThreads = 256;

}  // namespace sparkrt::contract::kv_cache

#endif  // SPARKRT_CONTRACT_KV_CACHE_H_
