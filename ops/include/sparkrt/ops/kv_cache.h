// KV-cache write ops: the host side of the `kv_cache` kernel module
// (contract in sparkrt/contract/kv_cache.h, docs/kernels.md "Module kv_cache").
//
// Each op is one KernelLaunch with the kernel's argument order and the launch
// geometry below, on any backend (cuda computes, cpu runs the reference, mock
// records). The arguments travel in a struct of named fields, declared in the
// kernel's parameter order, so a call reads like the contract:
//
//   auto kernels = sparkrt::ops::KvCacheKernels::resolve(dev);  // once
//   if (!kernels.ok()) return kernels.status();
//   absl::Status s = sparkrt::ops::reshape_and_cache(dev, *kernels, {
//       .key = key, .value = value, .k_cache = k_cache, .v_cache = v_cache,
//       .slot_mapping = slots, .num_tokens = n, .num_kv_heads = 8,
//       .head_dim = 128, .block_size = 16, .key_stride = 1024,
//       .value_stride = 1024}, stream);
//
// Every op returns before the kernel finishes (order with streams and events)
// and launches nothing when its work is empty (num_tokens or count is 0).
// Shapes the kernels cannot honour (a zero head_dim, a row stride shorter
// than a row, ...) are InvalidArgument before anything is launched; device
// memory is not read here (the cpu backend checks every extent a kernel
// touches). Why each geometry was chosen: docs/ops.md. Decode attention over
// these caches: sparkrt/ops/paged_attention.h.
#ifndef SPARKRT_OPS_KV_CACHE_H_
#define SPARKRT_OPS_KV_CACHE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sparkrt/contract/kv_cache.h"
#include "sparkrt/device.h"
#include "sparkrt/types.h"

namespace sparkrt::ops {

// Every kernel of the `kv_cache` module, resolved once per device, looked up
// in declaration order.
struct KvCacheKernels {
  Kernel fill_slots_from_block_table;
  Kernel reshape_and_cache;
  Kernel reshape_and_cache_flash_v_only;
  Kernel reshape_and_cache_fp8;
  Kernel fused_k_norm_rope_cache_write_bf16;
  Kernel fused_k_norm_rope_cache_write_bf16_mrope;
  Kernel fused_k_norm_rope_cache_write_fp8;
  // Whether the ops launch these kernels dependent (programmatic dependent
  // launch: each may start while the kernel before it on the stream still
  // runs, and waits for it first). resolve() sets it where the device
  // overlaps launches and the module was loaded from a cubin; set it false
  // to launch plainly.
  bool dependent_launch = false;

  // The first lookup that fails is returned as is (it names the module, the
  // entry and where the runtime searched).
  static absl::StatusOr<KvCacheKernels> resolve(Device& dev);
};

// slots[i] = block_table[(start_pos + i) / block_size] * block_size
//            + (start_pos + i) % block_size, for i < count.
// Grid (ceil(count / 256)), block (256): contract::kv_cache::kCopyThreads.
struct FillSlotsArgs {
  DevicePtr slots;        // i64[count], written
  DevicePtr block_table;  // i32[], one sequence's row of the block table
  uint32_t start_pos = 0;
  uint32_t count = 0;
  uint32_t block_size = 0;
};
absl::Status fill_slots_from_block_table(Device& dev, const KvCacheKernels& k,
                                         const FillSlotsArgs& a, Stream stream = {});

// Copies each token's key and value rows (bf16) into its slot of both caches.
// Grid (num_tokens), block (256).
struct ReshapeAndCacheArgs {
  DevicePtr key;           // bf16[num_tokens][key_stride]
  DevicePtr value;         // bf16[num_tokens][value_stride]
  DevicePtr k_cache;       // bf16 pool, [blocks][block_size][num_kv_heads][head_dim]
  DevicePtr v_cache;       // same layout as k_cache
  DevicePtr slot_mapping;  // i64[num_tokens]; a negative slot skips the token
  uint32_t num_tokens = 0;  // grid only, not a kernel argument
  uint32_t num_kv_heads = 0;
  uint32_t head_dim = 0;
  uint32_t block_size = 0;
  uint32_t key_stride = 0;    // elements between token rows, >= num_kv_heads * head_dim
  uint32_t value_stride = 0;  // likewise
};
absl::Status reshape_and_cache(Device& dev, const KvCacheKernels& k, const ReshapeAndCacheArgs& a,
                               Stream stream = {});

// The value half of reshape_and_cache; the K side belongs to the fused K path
// (writing K here as well would overwrite its once-rounded values).
// Grid (num_tokens), block (256).
struct ReshapeAndCacheVOnlyArgs {
  DevicePtr value;         // bf16[num_tokens][value_stride]
  DevicePtr v_cache;       // bf16 pool
  DevicePtr slot_mapping;  // i64[num_tokens]
  uint32_t num_tokens = 0;  // grid only
  uint32_t num_kv_heads = 0;
  uint32_t head_dim = 0;
  uint32_t block_size = 0;
  uint32_t value_stride = 0;
};
absl::Status reshape_and_cache_flash_v_only(Device& dev, const KvCacheKernels& k,
                                            const ReshapeAndCacheVOnlyArgs& a, Stream stream = {});

// Quantising write: k_cache = fp8_sat(key / k_scale), v_cache likewise, with
// `cache_stride` elements per cache block. Grid (num_tokens), block (256).
struct ReshapeAndCacheFp8Args {
  DevicePtr key;           // bf16[num_tokens][key_stride]
  DevicePtr value;         // bf16[num_tokens][value_stride]
  DevicePtr k_cache;       // fp8 e4m3fn pool
  DevicePtr v_cache;       // fp8 e4m3fn pool
  DevicePtr slot_mapping;  // i64[num_tokens]
  uint32_t num_tokens = 0;  // grid only
  uint32_t num_kv_heads = 0;
  uint32_t head_dim = 0;
  uint32_t block_size = 0;
  float k_scale = 1.0f;  // > 0
  float v_scale = 1.0f;  // > 0
  uint32_t key_stride = 0;
  uint32_t value_stride = 0;
  uint64_t cache_stride = 0;  // elements per block, >= block_size * num_kv_heads * head_dim
};
absl::Status reshape_and_cache_fp8(Device& dev, const KvCacheKernels& k,
                                   const ReshapeAndCacheFp8Args& a, Stream stream = {});

// Fused K path: RMSNorm -> RoPE -> cache write, in f32, rounded once at the
// write. Grid (num_tokens, num_kv_heads), block (head_dim): one thread per
// element of a head, so head_dim is at most the device's threads per block.
struct FusedKNormRopeArgs {
  DevicePtr k_in;           // bf16[num_tokens][num_kv_heads][head_dim], contiguous
  DevicePtr k_norm_weight;  // bf16[head_dim]
  DevicePtr positions;      // i32[num_tokens]
  DevicePtr k_cache;        // bf16 pool
  DevicePtr slot_mapping;   // i64[num_tokens]
  uint32_t num_tokens = 0;  // grid only
  uint32_t num_kv_heads = 0;
  uint32_t head_dim = 0;
  uint32_t rotary_dim = 0;  // even, <= head_dim
  uint32_t block_size = 0;
  float rms_eps = 1e-6f;
  float theta = 10000.0f;
};
absl::Status fused_k_norm_rope_cache_write_bf16(Device& dev, const KvCacheKernels& k,
                                                const FusedKNormRopeArgs& a, Stream stream = {});

// MRoPE: pair i rotates by (pos_t, pos_h, pos_w)[i % 3]. With three equal
// position arrays it equals the scalar variant bit for bit.
struct FusedKNormRopeMropeArgs {
  DevicePtr k_in;
  DevicePtr k_norm_weight;
  DevicePtr pos_t;  // i32[num_tokens]
  DevicePtr pos_h;  // i32[num_tokens]
  DevicePtr pos_w;  // i32[num_tokens]
  DevicePtr k_cache;
  DevicePtr slot_mapping;
  uint32_t num_tokens = 0;  // grid only
  uint32_t num_kv_heads = 0;
  uint32_t head_dim = 0;
  uint32_t rotary_dim = 0;
  uint32_t block_size = 0;
  float rms_eps = 1e-6f;
  float theta = 10000.0f;
};
absl::Status fused_k_norm_rope_cache_write_bf16_mrope(Device& dev, const KvCacheKernels& k,
                                                      const FusedKNormRopeMropeArgs& a,
                                                      Stream stream = {});

// As the bf16 variant, storing fp8_sat(rope(rmsnorm(k_in)) * inv_scale).
struct FusedKNormRopeFp8Args {
  DevicePtr k_in;
  DevicePtr k_norm_weight;
  DevicePtr positions;
  DevicePtr k_cache;  // fp8 e4m3fn pool (block stride block_size * num_kv_heads * head_dim)
  DevicePtr slot_mapping;
  uint32_t num_tokens = 0;  // grid only
  uint32_t num_kv_heads = 0;
  uint32_t head_dim = 0;
  uint32_t rotary_dim = 0;
  uint32_t block_size = 0;
  float rms_eps = 1e-6f;
  float theta = 10000.0f;
  float inv_scale = 1.0f;  // 1 / k_scale
};
absl::Status fused_k_norm_rope_cache_write_fp8(Device& dev, const KvCacheKernels& k,
                                               const FusedKNormRopeFp8Args& a, Stream stream = {});

}  // namespace sparkrt::ops

#endif  // SPARKRT_OPS_KV_CACHE_H_
