// Internal helpers of the op wrappers: kernel resolution and the shape checks
// that run before a launch. Failures build their message; the success path
// allocates nothing.
#ifndef SPARKRT_OPS_SRC_OP_CHECKS_H_
#define SPARKRT_OPS_SRC_OP_CHECKS_H_

#include <cstdint>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "sparkrt/contract/turbo_kv_cache.h"
#include "sparkrt/device.h"
#include "sparkrt/status_macros.h"

namespace sparkrt::ops::detail {

// One (module, entry) to resolve into a Kernel field.
struct KernelEntry {
  const char* module;
  const char* entry;
  Kernel* out;
};

// Resolves the entries in order; the first failure is returned as is (it
// names the module, the entry and where the runtime searched).
template <size_t N>
absl::Status resolve_all(Device& dev, const KernelEntry (&entries)[N]) {
  for (const KernelEntry& e : entries) {
    auto kernel = dev.kernel(e.module, e.entry);
    if (!kernel.ok()) return kernel.status();
    *e.out = *kernel;
  }
  return absl::OkStatus();
}

// Whether an op family may launch these kernels dependent
// (KernelLaunch::dependent_launch): the device overlaps dependent launches,
// and every kernel was loaded from a cubin. sparkrt builds its cubins for
// sm_90 and later with dependent_launch_sync() (sparkrt_kernel_utils.cuh)
// first in each entry; its PTX targets an older virtual architecture without
// it, so kernels loaded as PTX are always launched plain.
template <size_t N>
bool may_launch_dependent(const Device& dev, const KernelEntry (&entries)[N]) {
  if (!dev.properties().supports_dependent_launch) return false;
  for (const KernelEntry& e : entries)
    if (e.out->image_format() != SPARKRT_IMAGE_CUBIN) return false;
  return true;
}

// The largest divisor of n (> 0) that is at most `limit` (>= 1): the heads a
// decode CTA serves of a GQA group of n.
inline uint32_t largest_divisor_at_most(uint32_t n, uint32_t limit) {
  for (uint32_t h = n < limit ? n : limit; h > 1; --h)
    if (n % h == 0) return h;
  return 1;
}

inline absl::Status invalid(std::string_view op, std::string_view what) {
  return absl::InvalidArgumentError(absl::StrFormat("%s: %s", op, what));
}

inline absl::Status check_nonzero(std::string_view op, const char* name, uint64_t value) {
  if (value != 0) return absl::OkStatus();
  return invalid(op, absl::StrFormat("%s must be > 0", name));
}

// `value` <= `limit`, described as "name value must be <= limit_name limit".
inline absl::Status check_at_most(std::string_view op, const char* name, uint64_t value,
                                  const char* limit_name, uint64_t limit) {
  if (value <= limit) return absl::OkStatus();
  return invalid(op, absl::StrFormat("%s %d must be <= %s %d", name, value, limit_name, limit));
}

inline absl::Status check_scale(std::string_view op, const char* name, float scale) {
  if (scale > 0.0f) return absl::OkStatus();  // also refuses NaN
  return invalid(op, absl::StrFormat("%s %g must be a positive number", name, scale));
}

// The shape of a paged cache: KV heads, head_dim and block size non-zero.
inline absl::Status check_heads(std::string_view op, uint32_t num_kv_heads, uint32_t head_dim,
                         uint32_t block_size) {
  SPARKRT_RETURN_IF_ERROR(check_nonzero(op, "num_kv_heads", num_kv_heads));
  SPARKRT_RETURN_IF_ERROR(check_nonzero(op, "head_dim", head_dim));
  return check_nonzero(op, "block_size", block_size);
}

inline absl::Status check_row_stride(std::string_view op, const char* name, uint32_t stride,
                              uint32_t num_kv_heads, uint32_t head_dim) {
  const uint64_t row = uint64_t{num_kv_heads} * head_dim;
  if (stride >= row) return absl::OkStatus();
  return invalid(
      op, absl::StrFormat("%s %d is shorter than a token row (num_kv_heads %d * head_dim %d = %d "
                          "elements); pass the row pitch of the buffer in elements",
                          name, stride, num_kv_heads, head_dim, row));
}

inline absl::Status check_cache_stride(std::string_view op, uint64_t cache_stride,
                                       uint32_t block_size, uint32_t num_kv_heads,
                                       uint32_t head_dim) {
  const uint64_t block = uint64_t{block_size} * num_kv_heads * head_dim;
  if (cache_stride >= block) return absl::OkStatus();
  return invalid(op, absl::StrFormat(
                         "cache_stride %d is smaller than one cache block (block_size %d * "
                         "num_kv_heads %d * head_dim %d = %d elements)",
                         cache_stride, block_size, num_kv_heads, head_dim, block));
}

// The shape checks every paged decode shares: cache shape, a table, query
// heads a multiple of the KV heads, a q row pitch that holds the heads.
inline absl::Status check_attention(std::string_view op, uint32_t max_blocks_per_seq,
                                    uint32_t num_q_heads, uint32_t num_kv_heads,
                                    uint32_t head_dim, uint32_t block_size, uint32_t q_stride) {
  SPARKRT_RETURN_IF_ERROR(check_heads(op, num_kv_heads, head_dim, block_size));
  SPARKRT_RETURN_IF_ERROR(check_nonzero(op, "max_blocks_per_seq", max_blocks_per_seq));
  if (num_q_heads == 0 || num_q_heads % num_kv_heads != 0) {
    return invalid(op, absl::StrFormat("num_q_heads %d must be a positive multiple of "
                                       "num_kv_heads %d (GQA)",
                                       num_q_heads, num_kv_heads));
  }
  return check_row_stride(op, "q_stride", q_stride, num_q_heads, head_dim);
}

// The longest context a paged decode's sequences can have: the block
// table's capacity, bounded by the caller's max_seq_len (0: none) and the
// sliding window (0: none). What the split rules divide.
inline uint64_t decode_context(uint32_t max_blocks_per_seq, uint32_t block_size,
                               uint32_t max_seq_len, uint32_t sliding_window) {
  uint64_t context = uint64_t{max_blocks_per_seq} * block_size;
  if (max_seq_len != 0 && max_seq_len < context) context = max_seq_len;
  if (sliding_window != 0 && sliding_window < context) context = sliding_window;
  return context;
}

// A forced split count `splits` (> 1) against the `room` a workspace has
// (paged_decode_workspace_splits), with the size it would need.
inline absl::Status check_forced_splits(std::string_view op, uint32_t splits, uint32_t room,
                                        uint64_t needed_bytes, uint64_t workspace_bytes,
                                        uint64_t workspace_addr) {
  if (splits <= room) return absl::OkStatus();
  return invalid(op, absl::StrFormat("num_splits %d needs a workspace of %d bytes; got %d bytes "
                                     "at %#x (size it with paged_decode_workspace_bytes)",
                                     splits, needed_bytes, workspace_bytes, workspace_addr));
}

// A TurboQuant V pool's data section and block stride against the layout of
// `bits` (the write and the decode take the same two arguments).
inline absl::Status check_turbo_v_sections(std::string_view op, uint32_t bits,
                                           uint32_t block_size, uint32_t num_kv_heads,
                                           uint32_t head_dim, uint64_t v_data_section_bytes,
                                           uint64_t v_block_stride_bytes) {
  namespace format = sparkrt::contract::turbo_kv_cache;
  const format::Layout l = format::layout(bits, block_size, num_kv_heads, head_dim);
  if (format::v_sections_fit(l, block_size, v_data_section_bytes, v_block_stride_bytes))
    return absl::OkStatus();
  return invalid(op, absl::StrFormat("v_data_section_bytes %d and v_block_stride_bytes %d do not "
                                     "hold a block of %d-bit V (at least %d and %d; see "
                                     "turbo_cache_layout)",
                                     v_data_section_bytes, v_block_stride_bytes, bits,
                                     l.v_data_section_bytes, l.v_block_stride_bytes));
}

}  // namespace sparkrt::ops::detail

#endif  // SPARKRT_OPS_SRC_OP_CHECKS_H_
