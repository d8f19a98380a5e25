// TurboQuant cache writes and the V rotation: the host side of the
// `turbo_kv_cache` kernel module (format and launch contract in
// sparkrt/contract/turbo_kv_cache.h, docs/kernels.md "TurboQuant V cache").
//
// A TurboQuant cache keeps K as raw BF16 and V as 2-, 3- or 4-bit Lloyd-Max
// indices with an FP8 E4M3 scale per 16 values: 3.56x, 4.57x or 6.4x less V
// memory than BF16. V is meant to be rotated per head first
// (hadamard_transform_bf16), and the decode output rotated back with the same
// op (the normalized transform is its own inverse):
//
//   namespace ops = sparkrt::ops;
//   auto kernels = ops::TurboKvCacheKernels::resolve(dev);  // once
//   auto layout = ops::turbo_cache_layout(4, 16, 8, 128);   // every stride
//   ops::hadamard_transform_bf16(dev, *kernels, {.in = v, .out = v,
//       .num_tokens = n, .num_heads = 8, .head_dim = 128,
//       .in_stride = 1024, .out_stride = 1024}, stream);
//   ops::reshape_and_cache_bf16k_turbo4v(dev, *kernels, {.key = k, .value = v,
//       .k_cache = kc, .v_cache = vc, .slot_mapping = slots, .num_tokens = n,
//       .num_kv_heads = 8, .head_dim = 128, .block_size = 16,
//       .key_stride = 1024, .value_stride = 1024,
//       .k_block_stride_bytes = layout->k_block_stride_bytes,
//       .v_block_stride_bytes = layout->v_block_stride_bytes,
//       .v_data_section_bytes = layout->v_data_section_bytes}, stream);
//
// Every op returns before the kernel finishes, launches nothing for empty
// work, and refuses shapes the format cannot hold with InvalidArgument before
// anything is launched.
#ifndef SPARKRT_OPS_TURBO_KV_CACHE_H_
#define SPARKRT_OPS_TURBO_KV_CACHE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sparkrt/contract/turbo_kv_cache.h"
#include "sparkrt/device.h"
#include "sparkrt/types.h"

namespace sparkrt::ops {

// Every kernel of the `turbo_kv_cache` module, resolved once per device.
struct TurboKvCacheKernels {
  Kernel reshape_and_cache_flash_bf16k_turbo2v;
  Kernel reshape_and_cache_flash_bf16k_turbo3v;
  Kernel reshape_and_cache_flash_bf16k_turbo4v;
  Kernel hadamard_transform_bf16;
  // Whether the ops launch these kernels dependent (programmatic dependent
  // launch: each may start while the kernel before it on the stream still
  // runs, and waits for it first). resolve() sets it where the device
  // overlaps launches and the module was loaded from a cubin; set it false
  // to launch plainly.
  bool dependent_launch = false;

  static absl::StatusOr<TurboKvCacheKernels> resolve(Device& dev);
};

// The block layout of a TurboQuant cache of `bits` (2, 3 or 4) per V value:
// K blocks of k_block_stride_bytes (dense BF16), V blocks of
// v_block_stride_bytes whose first v_data_section_bytes hold the packed
// values and the rest the scales. InvalidArgument for bits outside 2..4, a
// zero block size or head count, or head_dim not a positive multiple of 16.
struct TurboCacheLayout {
  uint32_t bits = 0;
  uint64_t k_block_stride_bytes = 0;
  uint64_t v_data_section_bytes = 0;
  uint64_t v_block_stride_bytes = 0;
};
absl::StatusOr<TurboCacheLayout> turbo_cache_layout(uint32_t bits, uint32_t block_size,
                                                    uint32_t num_kv_heads, uint32_t head_dim);

// Writes each token's K row (raw) and V row (quantized) into its slot.
// Grid (num_tokens), block (256). The kernel honours k_block_stride_bytes
// (K blocks may be padded); the decode reads dense K blocks only.
struct ReshapeAndCacheTurboArgs {
  DevicePtr key;           // bf16[num_tokens][key_stride]
  DevicePtr value;         // bf16[num_tokens][value_stride], rotated
  DevicePtr k_cache;       // bf16 pool, blocks k_block_stride_bytes apart
  DevicePtr v_cache;       // TurboQuant V pool
  DevicePtr slot_mapping;  // i64[num_tokens]; a negative slot skips the token
  uint32_t num_tokens = 0;  // grid only
  uint32_t num_kv_heads = 0;
  uint32_t head_dim = 0;  // a multiple of 16
  uint32_t block_size = 0;
  uint32_t key_stride = 0;    // elements between token rows, >= num_kv_heads * head_dim
  uint32_t value_stride = 0;  // likewise
  uint64_t k_block_stride_bytes = 0;  // >= the layout's; a multiple of 2
  uint64_t v_block_stride_bytes = 0;  // the layout's (or more)
  uint64_t v_data_section_bytes = 0;  // the layout's (or more, within the block)
};
absl::Status reshape_and_cache_bf16k_turbo2v(Device& dev, const TurboKvCacheKernels& k,
                                             const ReshapeAndCacheTurboArgs& a, Stream stream = {});
absl::Status reshape_and_cache_bf16k_turbo3v(Device& dev, const TurboKvCacheKernels& k,
                                             const ReshapeAndCacheTurboArgs& a, Stream stream = {});
absl::Status reshape_and_cache_bf16k_turbo4v(Device& dev, const TurboKvCacheKernels& k,
                                             const ReshapeAndCacheTurboArgs& a, Stream stream = {});

// out = H x / sqrt(head_dim) for every (token, head) row of head_dim values:
// the normalized Walsh-Hadamard transform, its own inverse, so the same call
// rotates V before the write and the decode output back. In place when
// in == out and the strides agree. Grid (num_tokens, num_heads), block (256).
struct HadamardArgs {
  DevicePtr in;   // bf16[num_tokens][in_stride], heads contiguous within a row
  DevicePtr out;  // bf16[num_tokens][out_stride]
  uint32_t num_tokens = 0;  // grid only
  uint32_t num_heads = 0;   // grid only
  uint32_t head_dim = 0;    // a power of two in [64, 512]
  uint32_t in_stride = 0;   // elements, >= num_heads * head_dim
  uint32_t out_stride = 0;  // likewise
};
absl::Status hadamard_transform_bf16(Device& dev, const TurboKvCacheKernels& k,
                                     const HadamardArgs& a, Stream stream = {});

}  // namespace sparkrt::ops

#endif  // SPARKRT_OPS_TURBO_KV_CACHE_H_
