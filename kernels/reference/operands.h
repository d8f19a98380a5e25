// Helpers for references that read launch arguments as buffers of a known
// extent and refuse shapes their kernel cannot run, with messages that name
// the entry, the operand and what the extent was for.
#ifndef SPARKRT_KERNELS_REFERENCE_OPERANDS_H_
#define SPARKRT_KERNELS_REFERENCE_OPERANDS_H_

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "reference.h"

namespace sparkrt::reference {

// Argument `i` (named `name`) as `count` elements of T; on failure says what
// the launch needed before the memory's own reason.
template <typename T>
absl::StatusOr<std::span<T>> operand(const Launch& l, uint32_t i, const char* name, uint64_t count,
                                     const std::string& why) {
  auto s = l.span<T>(i, count);
  if (s.ok()) return s;
  return absl::Status(s.status().code(),
                      absl::StrFormat("%s: %s needs %d elements (%d bytes) for %s: %s", l.entry(),
                                      name, count, count * sizeof(T), why, s.status().message()));
}

// An optional buffer: empty when the pointer argument is null.
template <typename T>
absl::StatusOr<std::span<T>> optional_operand(const Launch& l, uint32_t i, const char* name,
                                              uint64_t count, const std::string& why) {
  if (l.address(i) == 0) return std::span<T>();
  return operand<T>(l, i, name, count, why);
}

inline absl::Status invalid_launch(const Launch& l, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrFormat("%s: %s", l.entry(), what));
}

// The sequences of a paged decode launch whose block_tables and seq_lens
// are arguments `tables_arg` and `tables_arg + 1`: every seq_len checked
// against the table's capacity, the table read through each sequence's last
// token, each sequence's window [first, len) found and every block id in it
// checked. `token_end(block, offset)` is how far into the cache (elements or
// bytes) the launch reads for the token at `offset` of `block`; the furthest
// is `cache_extent`.
struct PagedWindows {
  std::span<const int32_t> seq_lens;
  std::span<const int32_t> tables;
  std::vector<uint32_t> first;  // per sequence
  uint64_t cache_extent = 0;
};

template <typename TokenEnd>
absl::StatusOr<PagedWindows> paged_windows(const Launch& l, uint32_t tables_arg, uint32_t num_seqs,
                                           uint32_t max_blocks_per_seq, uint32_t block_size,
                                           uint32_t sliding_window, TokenEnd token_end) {
  PagedWindows w;
  SPARKRT_ASSIGN_OR_RETURN(w.seq_lens, operand<const int32_t>(l, tables_arg + 1, "seq_lens",
                                                              num_seqs, "one length per sequence"));
  const uint64_t capacity = uint64_t{max_blocks_per_seq} * block_size;
  uint64_t table_extent = 0;
  for (uint32_t q = 0; q < num_seqs; ++q) {
    const int32_t len = w.seq_lens[q];
    if (len < 0 || uint64_t(len) > capacity)
      return absl::OutOfRangeError(absl::StrFormat(
          "%s: seq_lens[%d] = %d is outside [0, max_blocks_per_seq %d * block_size %d = %d]",
          l.entry(), q, len, max_blocks_per_seq, block_size, capacity));
    if (len > 0) table_extent = uint64_t{q} * max_blocks_per_seq + (len - 1) / block_size + 1;
  }
  SPARKRT_ASSIGN_OR_RETURN(w.tables,
                           operand<const int32_t>(l, tables_arg, "block_tables", table_extent,
                                                  "the blocks of every sequence's last token"));
  w.first.assign(num_seqs, 0);
  for (uint32_t q = 0; q < num_seqs; ++q) {
    const uint32_t len = static_cast<uint32_t>(w.seq_lens[q]);
    if (sliding_window != 0 && len > sliding_window) w.first[q] = len - sliding_window;
    for (uint32_t t = w.first[q]; t < len; ++t) {
      const int32_t block = w.tables[uint64_t{q} * max_blocks_per_seq + t / block_size];
      if (block < 0)
        return absl::OutOfRangeError(absl::StrFormat(
            "%s: block_tables[%d][%d] = %d is negative but sequence %d's token %d lives there",
            l.entry(), q, t / block_size, block, q, t));
      w.cache_extent = std::max(w.cache_extent, token_end(uint64_t(block), t % block_size));
    }
  }
  return w;
}

}  // namespace sparkrt::reference

#endif  // SPARKRT_KERNELS_REFERENCE_OPERANDS_H_
