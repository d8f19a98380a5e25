// Paged decode attention ops: the host side of the `paged_attention` kernel
// module (contract in sparkrt/contract/paged_attention.h, docs/kernels.md
// "Module paged_attention"), over the caches that sparkrt/ops/kv_cache.h
// writes.
//
// Each op is one KernelLaunch (split-KV below kMinMergeSplits splits: two)
// with the kernel's argument order, on any backend (cuda computes, cpu runs
// the reference, mock records):
//
//   auto kernels = sparkrt::ops::PagedAttentionKernels::resolve(dev);  // once
//   if (!kernels.ok()) return kernels.status();
//   absl::Status s = sparkrt::ops::paged_decode_attn_bf16(dev, *kernels, {
//       .q = q, .k_cache = k_cache, .v_cache = v_cache, .out = out,
//       .block_tables = tables, .seq_lens = lens, .max_blocks_per_seq = 64,
//       .num_seqs = 8, .num_q_heads = 32, .num_kv_heads = 8, .head_dim = 128,
//       .block_size = 16, .inv_sqrt_d = 0.0883883f, .q_stride = 4096}, stream);
//
// Every op returns before the kernel finishes and launches nothing when
// num_seqs is 0. Shapes the kernels cannot honour (query heads not a multiple
// of KV heads, a head_dim off the contract, a forced split without room in
// the workspace, ...) are InvalidArgument before anything is launched. Why
// each geometry was chosen: docs/ops.md.
#ifndef SPARKRT_OPS_PAGED_ATTENTION_H_
#define SPARKRT_OPS_PAGED_ATTENTION_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sparkrt/contract/paged_attention.h"
#include "sparkrt/device.h"
#include "sparkrt/types.h"

namespace sparkrt::ops {

// Every kernel of the `paged_attention` module, resolved once per device,
// looked up in declaration order.
struct PagedAttentionKernels {
  Kernel paged_decode_attn_bf16;
  Kernel paged_decode_attn_fp8;
  Kernel paged_decode_attn_bf16_split;
  Kernel paged_decode_attn_fp8_split;
  Kernel paged_decode_attn_combine;
  Kernel paged_decode_attn_bf16_split_merge;
  Kernel paged_decode_attn_fp8_split_merge;
  // Whether the ops launch these kernels dependent (programmatic dependent
  // launch: each may start while the kernel before it on the stream still
  // runs, and waits for it first). resolve() sets it where the device
  // overlaps launches and the module was loaded from a cubin; set it false
  // to launch plainly.
  bool dependent_launch = false;

  // The first lookup that fails is returned as is (it names the module, the
  // entry and where the runtime searched).
  static absl::StatusOr<PagedAttentionKernels> resolve(Device& dev);
};

// Decode attention, one query token per sequence, GQA, optional sliding
// window. The op picks the geometry (see plan_paged_decode and docs/ops.md):
//
//   one pass   paged_decode_attn_{bf16,fp8}: grid (num_q_heads / hpc,
//              num_seqs), block 256. A CTA serves `hpc` query heads of one KV
//              head (the largest divisor of the GQA group up to 8), so each
//              K/V row is read once for all of them.
//   split-KV   when those CTAs fill at most half of the device and the
//              context is long: with num_splits >= kMinMergeSplits one launch of
//              paged_decode_attn_{bf16,fp8}_split_merge over grid
//              (num_q_heads / hpc, num_seqs, num_splits), block 256: each CTA
//              writes f32 partials to `workspace`, and the last CTA of each
//              (sequence, head group) to finish merges them into `out`. Needs
//              a workspace of paged_decode_workspace_bytes(...), ZEROED ONCE
//              after allocation (see below); without one the op never splits.
//              With fewer splits: paged_decode_attn_{bf16,fp8}_split, same
//              grid, writes the partials, then paged_decode_attn_combine,
//              grid (num_q_heads, num_seqs), block 256, merges them.
//   staging    the decode launches ask for DecodePlan::shared_mem bytes of
//              dynamic shared memory, where each warp stages its next tile
//              with cp.async while it computes the current one; 0 when two
//              such stages per warp leave no room for two CTAs per
//              multiprocessor (bf16 head_dim 256 on the H200; all but fp8
//              head_dim 72..128 on 99 KB parts such as a GB10) or cache rows
//              or strides are not a multiple of 16 bytes, and the kernel then
//              loads rows straight into registers.

// Block 256 is contract::paged_attention::kThreads, the heads per CTA at
// most its kMaxHeadsPerCta; head_dim a multiple of its kHeadDimAlign (one
// 16-byte row piece per lane) and at most its kMaxHeadDim.
//
// Largest split count the op uses, and the fewest tokens it gives a split.
inline constexpr uint32_t kMaxDecodeSplits = 64;
static_assert(kMaxDecodeSplits <= contract::paged_attention::kCombineMaxSplits);
inline constexpr uint32_t kMinTokensPerSplit = 128;
// From this many splits on, split-KV is one split-merge launch; below it,
// split then combine (measured faster there on the H200).
inline constexpr uint32_t kMinMergeSplits = 8;

struct PagedDecodeAttnArgs {
  DevicePtr q;             // bf16[num_seqs][q_stride], heads contiguous within a row
  DevicePtr k_cache;       // bf16 pool, 16-byte aligned
  DevicePtr v_cache;       // bf16 pool, 16-byte aligned
  DevicePtr out;           // bf16[num_seqs][num_q_heads][head_dim], written
  DevicePtr block_tables;  // i32[num_seqs][max_blocks_per_seq]
  DevicePtr seq_lens;      // i32[num_seqs], each in [0, max_blocks_per_seq * block_size]
  uint32_t max_blocks_per_seq = 0;
  uint32_t num_seqs = 0;  // grid only
  uint32_t num_q_heads = 0;
  uint32_t num_kv_heads = 0;
  uint32_t head_dim = 0;  // a multiple of 8, <= 256 (the contract's kMaxHeadDim)
  uint32_t block_size = 0;
  float inv_sqrt_d = 0.0f;  // the softmax scale, usually 1 / sqrt(head_dim)
  uint32_t q_stride = 0;    // elements between sequences, >= num_q_heads * head_dim
  uint32_t sliding_window = 0;  // 0: whole context

  // Geometry inputs (not kernel arguments).
  // A host-side bound on seq_lens; 0: max_blocks_per_seq * block_size.
  uint32_t max_seq_len = 0;
  // Scratch for split-KV partials and counters; null: never split. Zero it
  // once after allocating it and pass its whole size in workspace_bytes
  // every time (see paged_decode_workspace_bytes; DecodeWorkspace does both).
  DevicePtr workspace{};
  uint64_t workspace_bytes = 0;
  // 0: the op chooses; 1: never split; n > 1: exactly n splits (the
  // workspace must hold them).
  uint32_t num_splits = 0;
};
absl::Status paged_decode_attn_bf16(Device& dev, const PagedAttentionKernels& k,
                                    const PagedDecodeAttnArgs& a, Stream stream = {});

// The fp8 cache variant: K = fp8 * k_scale, V = fp8 * v_scale, blocks
// `cache_stride` elements apart. Same geometry as the bf16 op.
struct PagedDecodeAttnFp8Args {
  DevicePtr q;
  DevicePtr k_cache;  // fp8 e4m3fn pool, 16-byte aligned
  DevicePtr v_cache;  // fp8 e4m3fn pool, 16-byte aligned
  DevicePtr out;
  DevicePtr block_tables;
  DevicePtr seq_lens;
  uint32_t max_blocks_per_seq = 0;
  uint32_t num_seqs = 0;  // grid only
  uint32_t num_q_heads = 0;
  uint32_t num_kv_heads = 0;
  uint32_t head_dim = 0;
  uint32_t block_size = 0;
  float inv_sqrt_d = 0.0f;
  float k_scale = 1.0f;
  float v_scale = 1.0f;
  uint32_t q_stride = 0;
  uint64_t cache_stride = 0;  // elements per block, a multiple of 8
  uint32_t sliding_window = 0;

  // Geometry inputs, as in PagedDecodeAttnArgs.
  uint32_t max_seq_len = 0;
  DevicePtr workspace{};
  uint64_t workspace_bytes = 0;
  uint32_t num_splits = 0;
};
absl::Status paged_decode_attn_fp8(Device& dev, const PagedAttentionKernels& k,
                                   const PagedDecodeAttnFp8Args& a, Stream stream = {});

// Workspace bytes for up to `max_splits` splits. Layout, for a workspace of
// W = workspace_bytes: the counter region, the first
// paged_decode_counter_bytes(W) bytes (W / 16 rounded down to 256), holds
// the u32 arrival counters [num_seqs][num_q_heads / hpc]; then the f32
// partial outputs [num_seqs][num_q_heads][splits][head_dim]; then, 256-byte
// aligned, the partial (max, sum) pairs [num_seqs][num_q_heads][splits][2].
//
// The counters must be zero when a split launch starts, and every split
// launch leaves them zero: zero the whole workspace once after allocating
// it (e.g. Device::memset(ws, 0, W)); then it serves any later decode call,
// of any shape, on one stream at a time, as long as workspace_bytes stays W.
// The partials need no initialisation. (The cpu backend refuses a launch
// that finds a counter not zero.)
uint64_t paged_decode_workspace_bytes(uint32_t num_seqs, uint32_t num_q_heads, uint32_t head_dim,
                                      uint32_t max_splits = kMaxDecodeSplits);
// The counter region at the start of a workspace of `workspace_bytes`.
uint64_t paged_decode_counter_bytes(uint64_t workspace_bytes);
// The most splits (up to kMaxDecodeSplits) whose partials a workspace of
// `workspace_bytes` holds for this shape; 0 when it holds fewer than 2.
uint32_t paged_decode_workspace_splits(uint64_t workspace_bytes, uint32_t num_seqs,
                                       uint32_t num_q_heads, uint32_t head_dim);
// Where the partials of `splits` splits lie in a workspace (the layout
// above): the f32 outputs and the (max, sum) pairs, as
// paged_decode_attn_combine reads them. Decode ops of other cache formats
// that merge with that kernel use the same workspace.
struct DecodePartials {
  DevicePtr acc;
  DevicePtr ml;
};
DecodePartials paged_decode_partials(DevicePtr workspace, uint64_t workspace_bytes,
                                     uint32_t num_seqs, uint32_t num_q_heads, uint32_t head_dim,
                                     uint32_t splits);

// A decode workspace that is ready to use: allocated on `dev` with
// paged_decode_workspace_bytes(...) and zeroed once, freed on destruction.
// Move-only; the Device must outlive it.
//
//   auto ws = sparkrt::ops::DecodeWorkspace::create(dev, max_seqs, 32, 128);
//   if (!ws.ok()) return ws.status();
//   args.workspace = ws->ptr();
//   args.workspace_bytes = ws->bytes();
class DecodeWorkspace {
 public:
  static absl::StatusOr<DecodeWorkspace> create(Device& dev, uint32_t num_seqs,
                                                uint32_t num_q_heads, uint32_t head_dim,
                                                uint32_t max_splits = kMaxDecodeSplits);
  DecodeWorkspace(DecodeWorkspace&& other) noexcept;
  DecodeWorkspace& operator=(DecodeWorkspace&& other) noexcept;
  ~DecodeWorkspace();

  DevicePtr ptr() const { return ptr_; }
  uint64_t bytes() const { return bytes_; }

 private:
  DecodeWorkspace(Device* dev, DevicePtr ptr, uint64_t bytes)
      : dev_(dev), ptr_(ptr), bytes_(bytes) {}
  void release();

  Device* dev_ = nullptr;
  DevicePtr ptr_{};
  uint64_t bytes_ = 0;
};

// The geometry the decode ops choose, for callers that report or size it.
struct DecodePlan {
  uint32_t heads_per_cta = 1;  // grid.x = num_q_heads / heads_per_cta
  uint32_t num_splits = 1;     // 1: one pass, no workspace used
  // Dynamic shared memory of the decode launch: the warps' cp.async staging
  // (0: the kernel loads rows into registers). See docs/ops.md.
  uint32_t shared_mem = 0;
};
// What paged_decode_attn_{bf16,fp8} launch for these arguments on `dev`.
// InvalidArgument for shapes the kernels cannot run or a forced split
// without room in the workspace.
absl::StatusOr<DecodePlan> plan_paged_decode(const Device& dev, const PagedDecodeAttnArgs& a);
absl::StatusOr<DecodePlan> plan_paged_decode(const Device& dev, const PagedDecodeAttnFp8Args& a);

}  // namespace sparkrt::ops

#endif  // SPARKRT_OPS_PAGED_ATTENTION_H_
