// MLA (multi-head latent attention) ops: the host side of the `mla` kernel
// module (contracts in docs/kernels.md, "Module mla").
//
// The MLA cache holds one KV head of kCacheDim = 576 values per token: the
// kLatentDim = 512 latent values, then the kRopeDim = 64 rope values (the
// constants of the module's contract, sparkrt/contract/mla.h).
// K is the whole row, V is its latent part. Queries are "absorbed": each
// head's nope part is multiplied into the latent space (mla_batched_gemv),
// its rope part is copied next to it (mla_q_rope_scatter, RoPE,
// mla_q_rope_writeback), so decode sees one 576-wide query row per head.
//
// Each op is one KernelLaunch with the kernel's argument order and the
// geometry below, on any backend (cuda computes, cpu runs the reference, mock
// records); the arguments travel in a struct of named fields in the kernel's
// parameter order:
//
//   auto kernels = sparkrt::ops::MlaKernels::resolve(dev);  // once
//   if (!kernels.ok()) return kernels.status();
//   absl::Status s = sparkrt::ops::mla_paged_decode_fp8(dev, *kernels, {
//       .q = q, .k_cache = cache, .v_cache = cache, .o = out,
//       .block_tables = tables, .seq_lens = lens, .max_blocks_per_seq = 64,
//       .num_q_heads = 64, .num_kv_heads = 1, .q_head_dim = 576,
//       .kv_cache_dim = 576, .block_size = 64, .inv_sqrt_d = 0.0722f,
//       .k_scale = ks, .v_scale = vs, .cache_stride = 64 * 576,
//       .num_seqs = 1}, stream);
//
// Every op returns before the kernel finishes and launches nothing when its
// work is empty (no heads, no outputs, no sequences). Shapes the kernels
// cannot honour are InvalidArgument before anything is launched; device
// pointers are not checked here (the cpu backend checks every extent a
// kernel touches).
#ifndef SPARKRT_OPS_MLA_H_
#define SPARKRT_OPS_MLA_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sparkrt/contract/mla.h"
#include "sparkrt/device.h"
#include "sparkrt/types.h"

namespace sparkrt::ops {

// Every kernel of the `mla` module, resolved once per device, looked up in
// declaration order.
struct MlaKernels {
  Kernel mla_batched_gemv;
  Kernel mla_q_rope_scatter;
  Kernel mla_q_rope_writeback;
  Kernel mla_cache_assemble;
  Kernel mla_paged_decode_nvfp4;
  Kernel mla_paged_decode_nvfp4_split;
  Kernel mla_paged_decode_fp8;
  Kernel mla_paged_decode_fp8_split;
  Kernel mla_decode_combine;

  // The first lookup that fails is returned as is.
  static absl::StatusOr<MlaKernels> resolve(Device& dev);
};

// output[h * output_stride + n] = sum_k weight[h][n][k] * input[h * input_stride + k]
// for h < num_heads, n < n_out; bf16 in and out, f32 accumulation.
// Grid (ceil(n_out / 8), num_heads), block (256).
struct MlaBatchedGemvArgs {
  DevicePtr input;   // bf16, head h at h * input_stride
  DevicePtr weight;  // bf16[num_heads][n_out][k]
  DevicePtr output;  // bf16, head h at h * output_stride, written
  uint32_t n_out = 0;
  uint32_t k = 0;
  uint32_t num_heads = 0;      // grid only, not a kernel argument
  uint32_t input_stride = 0;   // elements between heads, >= k
  uint32_t output_stride = 0;  // elements between heads, >= n_out
};
absl::Status mla_batched_gemv(Device& dev, const MlaKernels& k, const MlaBatchedGemvArgs& a,
                              Stream stream = {});

// Copies each head's rope part q_full[h][nope, nope + rope) to
// q_absorbed_buf[h][kv_lora, kv_lora + rope) and to q_rope_contiguous[h][0, rope)
// (bf16, exact). Grid (1), block (256).
struct MlaQRopeScatterArgs {
  DevicePtr q_full;             // bf16[nq][hd]
  DevicePtr q_absorbed_buf;     // bf16[nq][mla_cache_dim], rope parts written
  DevicePtr q_rope_contiguous;  // bf16[nq][rope], written
  uint32_t nq = 0;
  uint32_t hd = 0;  // >= nope + rope
  uint32_t nope = 0;
  uint32_t rope = 0;
  uint32_t kv_lora = 0;        // where the rope part starts in an absorbed row
  uint32_t mla_cache_dim = 0;  // >= kv_lora + rope
};
absl::Status mla_q_rope_scatter(Device& dev, const MlaKernels& k, const MlaQRopeScatterArgs& a,
                                Stream stream = {});

// q_absorbed_buf[h][kv_lora, kv_lora + rope) = q_rope_direct[h][0, rope)
// (bf16, exact). Grid (1), block (256).
struct MlaQRopeWritebackArgs {
  DevicePtr q_rope_direct;   // bf16[nq][rope]
  DevicePtr q_absorbed_buf;  // bf16[nq][mla_cache_dim], rope parts written
  uint32_t nq = 0;
  uint32_t rope = 0;
  uint32_t kv_lora = 0;
  uint32_t mla_cache_dim = 0;  // >= kv_lora + rope
};
absl::Status mla_q_rope_writeback(Device& dev, const MlaKernels& k, const MlaQRopeWritebackArgs& a,
                                  Stream stream = {});

// One token's bf16 cache rows: k_cache = [kv_latent | k_rope | zeros],
// v_cache = [kv_latent | zeros], mla_cache_dim values each.
// Grid (1), block (max(mla_cache_dim, 256)).
struct MlaCacheAssembleArgs {
  DevicePtr kv_latent;  // bf16[kv_lora]
  DevicePtr k_rope;     // bf16[rope], already rotated
  DevicePtr k_cache;    // bf16[mla_cache_dim], the token's K row, written
  DevicePtr v_cache;    // bf16[mla_cache_dim], the token's V row, written
  uint32_t kv_lora = 0;
  uint32_t rope = 0;
  uint32_t mla_cache_dim = 0;  // >= kv_lora + rope, <= the device's threads per block
};
absl::Status mla_cache_assemble(Device& dev, const MlaKernels& k, const MlaCacheAssembleArgs& a,
                                Stream stream = {});

// ── paged decode over the compressed cache ──────────────────────────────────
//
// One query token per sequence; for query head h of sequence s over the
// tokens t it attends: score_t = inv_sqrt_d * q[s][h][0, q_head_dim) . K_t[0, q_head_dim),
// p = softmax(score), o[s][h] = sum_t p_t V_t[0, kv_cache_dim - 64), rounded
// once to bf16.
//
// Both decode ops pick their geometry (see plan_mla_paged_decode_fp8,
// plan_mla_paged_decode_nvfp4 and docs/ops.md); for fp8:
//   tiled     for the MLA row (kv_cache_dim 576) with q_head_dim a multiple
//             of 16, cache_stride a multiple of 16 and k_cache, v_cache, o
//             and comp_pool 16-byte aligned: grid (num_kv_heads *
//             ceil(group / 16), num_seqs), block (320: 8 consumer warps
//             and two staging warps), dynamic shared memory for two teams
//             of consumer warps and up to 4 64-token stages (2 when V is a
//             separate pool; one team with 2 stages where the device allows
//             no more; less than that: per head); each CTA serves up to 16 query
//             heads of one KV head on the tensor cores, reading each cache
//             row once for all of them;
//   split-KV  the tiled form over grid.z = num_splits when those CTAs would
//             fill at most half of the device and a workspace is given:
//             mla_paged_decode_fp8_split writes f32 partials to the workspace,
//             then mla_decode_combine, grid (num_q_heads, num_seqs), block
//             (256), merges them (and the sinks) into o;
//   per head  otherwise one CTA per query head, grid (num_q_heads, num_seqs),
//             block (256), 4352 bytes of dynamic shared memory (its scratch;
//             correct for every valid shape, far slower).
// NVFP4 the same, with these differences: the tiled kernel needs
// block_stride_bytes a multiple of 16 and data_section_bytes a multiple of 4
// (besides kv_cache_dim 576, q_head_dim a multiple of 16 and 16-byte aligned
// k_cache, v_cache and o); its stages are about half an fp8 stage (up to 4
// of them with a separate V pool too), and its entry keeps the per-head
// scratch (4352 bytes) in static shared memory, which the tiled launch's
// dynamic shared memory must leave room for (a GB10 gets two teams and two
// stages; a separate V pool does not fit there); the split entry is
// mla_paged_decode_nvfp4_split; the per-head launch has no dynamic shared
// memory.

// The tiled decode takes kv_cache_dim contract::mla::kCacheDim (the MLA row);
// its tiles, heads per CTA and threads are the contract's kTile, kTiledRows
// and kTiledThreads.
// Largest split count the op uses, and the fewest tiles it gives a split.
inline constexpr uint32_t kMlaMaxDecodeSplits = 64;
static_assert(kMlaMaxDecodeSplits <= contract::mla::kCombineMaxSplits);
inline constexpr uint32_t kMlaMinTilesPerSplit = 2;

// NVFP4 cache: each cache block is block_stride_bytes long; its first
// data_section_bytes hold the E2M1 values of its block_size token rows two to
// a byte (even value index in the low nibble), followed by one E4M3 scale
// per 16 consecutive values. Value = e2m1 * scale.
struct MlaPagedDecodeNvfp4Args {
  DevicePtr q;             // bf16[num_seqs][num_q_heads][q_head_dim]
  DevicePtr k_cache;       // NVFP4 pool
  DevicePtr v_cache;       // NVFP4 pool (may equal k_cache: V is the latent part)
  DevicePtr o;             // bf16[num_seqs][num_q_heads][kv_cache_dim - 64], written
  DevicePtr block_tables;  // i32[num_seqs][max_blocks_per_seq]
  DevicePtr seq_lens;      // i32[num_seqs], each in [0, max_blocks_per_seq * block_size]
  uint32_t max_blocks_per_seq = 0;
  uint32_t num_q_heads = 0;
  uint32_t num_kv_heads = 1;
  uint32_t q_head_dim = contract::mla::kCacheDim;    // <= kv_cache_dim
  uint32_t kv_cache_dim = contract::mla::kCacheDim;  // a multiple of 16 in (64, 1024]
  uint32_t block_size = 0;
  float inv_sqrt_d = 0.0f;
  // With values = block_size * num_kv_heads * kv_cache_dim per block:
  uint64_t block_stride_bytes = 0;  // >= data_section_bytes + values / 16
  uint64_t data_section_bytes = 0;  // >= values / 2
  uint32_t num_seqs = 0;            // grid only
  // Scratch for split-KV partials (f32), 16-byte aligned; null: never split.
  DevicePtr workspace{};
  uint64_t workspace_bytes = 0;
  // 0: the op chooses; 1: never split; n > 1: exactly n splits (the tiled
  // geometry and a workspace that holds them are then required).
  uint32_t num_splits = 0;
};
absl::Status mla_paged_decode_nvfp4(Device& dev, const MlaKernels& k,
                                    const MlaPagedDecodeNvfp4Args& a, Stream stream = {});

// The bytes of one NVFP4 cache block of `block_size` tokens with its scale
// section packed right after the data: {data_section_bytes, block_stride_bytes}.
struct MlaNvfp4BlockLayout {
  uint64_t data_section_bytes = 0;
  uint64_t block_stride_bytes = 0;
};
MlaNvfp4BlockLayout mla_nvfp4_block_layout(uint32_t block_size, uint32_t num_kv_heads = 1,
                                           uint32_t kv_cache_dim = contract::mla::kCacheDim);

// FP8 E4M3 cache: K = fp8 * k_scale, V = fp8 * v_scale, blocks cache_stride
// bytes apart. sliding_window W > 0 attends to the last min(W, seq_len)
// tokens. sinks (f32[num_q_heads], may be null) add exp(sink - max) to each
// head's softmax denominator. comp_pool (may be null) holds comp_block_count
// compressed FP8 rows per sequence, [num_seqs][comp_block_count][num_kv_heads]
// [kv_cache_dim] with the same scales, attended in addition to the window.
struct MlaPagedDecodeFp8Args {
  DevicePtr q;             // bf16[num_seqs][num_q_heads][q_head_dim]
  DevicePtr k_cache;       // fp8 e4m3fn pool
  DevicePtr v_cache;       // fp8 e4m3fn pool (may equal k_cache)
  DevicePtr o;             // bf16[num_seqs][num_q_heads][kv_cache_dim - 64], written
  DevicePtr block_tables;  // i32[num_seqs][max_blocks_per_seq]
  DevicePtr seq_lens;      // i32[num_seqs]
  uint32_t max_blocks_per_seq = 0;
  uint32_t num_q_heads = 0;
  uint32_t num_kv_heads = 1;
  uint32_t q_head_dim = contract::mla::kCacheDim;
  uint32_t kv_cache_dim = contract::mla::kCacheDim;  // in (64, 1024]
  uint32_t block_size = 0;
  float inv_sqrt_d = 0.0f;
  float k_scale = 1.0f;         // > 0
  float v_scale = 1.0f;         // > 0
  uint64_t cache_stride = 0;    // bytes per block, >= block_size * num_kv_heads * kv_cache_dim
  uint32_t num_seqs = 0;        // grid only
  uint32_t sliding_window = 0;  // 0: the whole context
  DevicePtr sinks{};            // f32[num_q_heads] or null
  DevicePtr comp_pool{};        // fp8 compressed rows or null (then comp_block_count must be 0)
  uint32_t comp_block_count = 0;
  // Scratch for split-KV partials (f32), 16-byte aligned; null: never split.
  DevicePtr workspace{};
  uint64_t workspace_bytes = 0;
  // 0: the op chooses; 1: never split; n > 1: exactly n splits (the tiled
  // geometry and a workspace that holds them are then required).
  uint32_t num_splits = 0;
};
absl::Status mla_paged_decode_fp8(Device& dev, const MlaKernels& k, const MlaPagedDecodeFp8Args& a,
                                  Stream stream = {});

// Workspace bytes for up to `max_splits` splits: f32 partial outputs
// [num_seqs][num_q_heads][splits][kv_cache_dim - 64], then, 256-byte aligned,
// the partial (max, sum) pairs [num_seqs][num_q_heads][splits][2].
uint64_t mla_decode_workspace_bytes(uint32_t num_seqs, uint32_t num_q_heads,
                                    uint32_t kv_cache_dim = contract::mla::kCacheDim,
                                    uint32_t max_splits = kMlaMaxDecodeSplits);

// What mla_paged_decode_fp8 (or _nvfp4) launches for these arguments on `dev`.
struct MlaDecodePlan {
  bool tiled = false;
  Dim3 grid;                // of the decode kernel
  Dim3 block;               // of the decode kernel
  uint32_t shared_mem = 0;  // dynamic bytes of the decode kernel
  uint32_t num_splits = 1;  // > 1: the split entry, then mla_decode_combine
};
// InvalidArgument for shapes no kernel can run, or a forced split the tiled
// geometry or the workspace cannot honour.
absl::StatusOr<MlaDecodePlan> plan_mla_paged_decode_fp8(const Device& dev,
                                                         const MlaPagedDecodeFp8Args& a);
absl::StatusOr<MlaDecodePlan> plan_mla_paged_decode_nvfp4(const Device& dev,
                                                           const MlaPagedDecodeNvfp4Args& a);

}  // namespace sparkrt::ops

#endif  // SPARKRT_OPS_MLA_H_
