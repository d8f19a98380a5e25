// Paged decode attention over a TurboQuant cache (BF16 K, 2/3/4-bit V): the
// host side of the `turbo_paged_attention` kernel module (contract in
// sparkrt/contract/turbo_paged_attention.h, docs/kernels.md "Module
// turbo_paged_attention"), over the caches sparkrt/ops/turbo_kv_cache.h
// writes. V went through hadamard_transform_bf16 before the write, so `out`
// is rotated: the same op turns it back.
//
// Geometry (plan_paged_decode_turbo): grid (num_q_heads / hpc, num_seqs),
// block 256, a CTA serving hpc query heads of one KV head (the largest
// divisor of the GQA group up to 8). With a workspace (sized and zeroed as
// for the bf16 decode: DecodeWorkspace) and few CTAs for the device, the op
// splits the context: paged_decode_attn_bf16k_turbo<b>v_split over grid.z =
// num_splits writes partials that paged_attention.paged_decode_attn_combine
// merges. Returns before the kernels finish; launches nothing when num_seqs
// is 0; InvalidArgument before any launch for shapes the kernels cannot run.
#ifndef SPARKRT_OPS_TURBO_PAGED_ATTENTION_H_
#define SPARKRT_OPS_TURBO_PAGED_ATTENTION_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sparkrt/contract/turbo_paged_attention.h"
#include "sparkrt/device.h"
#include "sparkrt/ops/paged_attention.h"
#include "sparkrt/types.h"

namespace sparkrt::ops {

// Every kernel the turbo decode ops launch, resolved once per device: the
// module's entries, then the bf16 decode's combine.
struct TurboPagedAttentionKernels {
  Kernel paged_decode_attn_bf16k_turbo2v;
  Kernel paged_decode_attn_bf16k_turbo3v;
  Kernel paged_decode_attn_bf16k_turbo4v;
  Kernel paged_decode_attn_bf16k_turbo2v_split;
  Kernel paged_decode_attn_bf16k_turbo3v_split;
  Kernel paged_decode_attn_bf16k_turbo4v_split;
  Kernel paged_decode_attn_combine;  // module paged_attention
  // Whether the ops launch these kernels dependent (programmatic dependent
  // launch: each may start while the kernel before it on the stream still
  // runs, and waits for it first). resolve() sets it where the device
  // overlaps launches and the module was loaded from a cubin; set it false
  // to launch plainly.
  bool dependent_launch = false;

  static absl::StatusOr<TurboPagedAttentionKernels> resolve(Device& dev);
};

struct PagedDecodeAttnTurboArgs {
  DevicePtr q;             // bf16[num_seqs][q_stride]
  DevicePtr k_cache;       // bf16 pool of dense blocks, 16-byte aligned
  DevicePtr v_cache;       // TurboQuant V pool of the same bit width as the op
  DevicePtr out;           // bf16[num_seqs][num_q_heads][head_dim], written (rotated)
  DevicePtr block_tables;  // i32[num_seqs][max_blocks_per_seq]
  DevicePtr seq_lens;      // i32[num_seqs]
  uint32_t max_blocks_per_seq = 0;
  uint32_t num_seqs = 0;  // grid only
  uint32_t num_q_heads = 0;
  uint32_t num_kv_heads = 0;
  uint32_t head_dim = 0;  // 64, 128 or 256
  uint32_t block_size = 0;
  float inv_sqrt_d = 0.0f;
  uint32_t q_stride = 0;
  uint64_t v_block_stride_bytes = 0;  // turbo_cache_layout's
  uint64_t v_data_section_bytes = 0;  // turbo_cache_layout's
  uint32_t sliding_window = 0;

  // Geometry inputs, as in PagedDecodeAttnArgs.
  uint32_t max_seq_len = 0;
  DevicePtr workspace{};
  uint64_t workspace_bytes = 0;
  uint32_t num_splits = 0;  // 0: the op chooses; 1: never; n: exactly n
};
absl::Status paged_decode_attn_bf16k_turbo2v(Device& dev, const TurboPagedAttentionKernels& k,
                                             const PagedDecodeAttnTurboArgs& a, Stream stream = {});
absl::Status paged_decode_attn_bf16k_turbo3v(Device& dev, const TurboPagedAttentionKernels& k,
                                             const PagedDecodeAttnTurboArgs& a, Stream stream = {});
absl::Status paged_decode_attn_bf16k_turbo4v(Device& dev, const TurboPagedAttentionKernels& k,
                                             const PagedDecodeAttnTurboArgs& a, Stream stream = {});

// What the ops launch for these arguments with V of `bits` on `dev`
// (shared_mem is always 0: the kernels use static shared memory only).
absl::StatusOr<DecodePlan> plan_paged_decode_turbo(const Device& dev, uint32_t bits,
                                                   const PagedDecodeAttnTurboArgs& a);

}  // namespace sparkrt::ops

#endif  // SPARKRT_OPS_TURBO_PAGED_ATTENTION_H_
