// Helpers for references that read launch arguments as buffers of a known
// extent and refuse shapes their kernel cannot run, with messages that name
// the entry, the operand and what the extent was for.
#ifndef SPARKRT_KERNELS_REFERENCE_OPERANDS_H_
#define SPARKRT_KERNELS_REFERENCE_OPERANDS_H_

#include <cstdint>
#include <span>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "reference.h"

namespace sparkrt::reference {

// Argument `i` (named `name`) as `count` elements of T; on failure says what
// the launch needed before the memory's own reason.
template <typename T>
absl::StatusOr<std::span<T>> operand(const Launch& l, uint32_t i, const char* name,
                                     uint64_t count, const std::string& why) {
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

}  // namespace sparkrt::reference

#endif  // SPARKRT_KERNELS_REFERENCE_OPERANDS_H_
