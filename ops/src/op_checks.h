// Internal helpers of the op wrappers: kernel resolution and the shape checks
// that run before a launch. Failures build their message; the success path
// allocates nothing.
#ifndef SPARKRT_OPS_SRC_OP_CHECKS_H_
#define SPARKRT_OPS_SRC_OP_CHECKS_H_

#include <cstdint>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
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

}  // namespace sparkrt::ops::detail

#endif  // SPARKRT_OPS_SRC_OP_CHECKS_H_
