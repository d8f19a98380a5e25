// What the C API's handles are, and the conversions every entry point uses:
// absl::Status to sparkrt_status*, exceptions to errors, struct_size checks.
#ifndef SPARKRT_CAPI_C_API_INTERNAL_H_
#define SPARKRT_CAPI_C_API_INTERNAL_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "sparkrt/device.h"
#include "sparkrt/kernel_launch.h"
#include "sparkrt/sparkrt_c.h"

struct sparkrt_status {
  int32_t code;
  std::string message;
};

// A kernel handle: the C++ Kernel, the device it launches on, and the strings
// the info calls hand out.
struct sparkrt_kernel {
  sparkrt::Device* device;
  sparkrt::Kernel kernel;
  std::string declaration;
  std::vector<std::string> type_names;  // per parameter
  // The layout of the first argument list of scalars that passed the
  // signature check: a later list of the same kinds has the same layout (a
  // scalar sits at its natural alignment), so it is written into place and
  // launched without packing or checking it again. layout_state: 0 empty,
  // 1 being written by one thread, 2 ready (then never written again).
  std::atomic<int> layout_state{0};
  sparkrt::KernelLaunch::CheckedLayout layout;
};

namespace sparkrt::capi {

// An op family's kernels, resolved on the first call that needs them. A failed
// resolution is not kept: the next call tries again.
template <typename Kernels>
class LazyKernels {
 public:
  absl::StatusOr<const Kernels*> get(Device& dev) {
    if (const Kernels* k = ready_.load(std::memory_order_acquire)) return k;
    std::lock_guard<std::mutex> lock(mu_);
    if (!value_) {
      absl::StatusOr<Kernels> r = Kernels::resolve(dev);
      if (!r.ok()) return r.status();
      value_.emplace(*std::move(r));
      ready_.store(&*value_, std::memory_order_release);
    }
    return &*value_;
  }

 private:
  std::atomic<const Kernels*> ready_{nullptr};
  std::mutex mu_;
  std::optional<Kernels> value_;
};

struct OpKernels;  // c_api_ops.cc
OpKernels* new_op_kernels();
void destroy_op_kernels(OpKernels* k);
struct OpKernelsDeleter {
  void operator()(OpKernels* k) const { destroy_op_kernels(k); }
};

}  // namespace sparkrt::capi

struct sparkrt_device {
  std::unique_ptr<sparkrt::Device> device;
  std::mutex mu;  // guards kernels and comm_library
  absl::flat_hash_map<std::pair<std::string, std::string>, std::unique_ptr<sparkrt_kernel>> kernels;
  std::optional<std::string> comm_library;
  std::unique_ptr<sparkrt::capi::OpKernels, sparkrt::capi::OpKernelsDeleter> ops;
};

namespace sparkrt::capi {

// Returned when not even an error can be allocated; sparkrt_status_free
// knows not to free it.
extern sparkrt_status g_out_of_memory;

// nullptr for OK: the success path allocates nothing.
inline sparkrt_status* to_c(const absl::Status& s) {
  if (s.ok()) return nullptr;
  try {
    return new sparkrt_status{static_cast<int32_t>(s.code()), std::string(s.message())};
  } catch (...) {
    return &g_out_of_memory;
  }
}

inline sparkrt_status* invalid(std::string message) {
  return to_c(absl::InvalidArgumentError(message));
}

// Runs `body` (returning absl::Status; given `function`, the entry point's
// name, when it takes it: inside a lambda __func__ is "operator()") with no
// exception escaping: an allocation failure is RESOURCE_EXHAUSTED, anything
// else INTERNAL.
template <typename Body>
sparkrt_status* guarded(const char* function, Body&& body) {
  try {
    if constexpr (std::is_invocable_v<Body, const char*>)
      return to_c(body(function));
    else
      return to_c(body());
  } catch (const std::bad_alloc&) {
    return to_c(absl::ResourceExhaustedError(absl::StrFormat("%s: out of host memory", function)));
  } catch (const std::exception& e) {
    return to_c(absl::InternalError(absl::StrFormat("%s: %s", function, e.what())));
  } catch (...) {
    return to_c(absl::InternalError(absl::StrFormat("%s: unknown exception", function)));
  }
}

inline absl::Status null_error(const char* function, const char* what) {
  return absl::InvalidArgumentError(
      absl::StrFormat("%s: `%s` is NULL; pass a valid pointer", function, what));
}

// A struct the caller fills: its struct_size must cover the 1.0 fields
// (`needed`, the header's SPARKRT_C_<NAME>_SIZE); a larger one is a newer
// caller whose extra fields this library does not know.
inline absl::Status check_in_struct(const char* function, const char* type, size_t struct_size,
                                    size_t needed) {
  if (struct_size >= needed) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrFormat(
      "%s: %s.struct_size is %d, at least %d expected; set it to the header's size macro",
      function, type, struct_size, needed));
}

// A struct the library fills: written up to the caller's struct_size (an
// older caller knows fewer fields), which must reach past its first field.
template <typename T>
absl::Status fill_out_struct(const char* function, const char* type, T* out, const T& full,
                             size_t first_field_end) {
  if (out->struct_size < first_field_end)
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: %s.struct_size is %d, at least %d expected; set it to the header's size macro",
        function, type, out->struct_size, first_field_end));
  const size_t n = out->struct_size < sizeof(T) ? out->struct_size : sizeof(T);
  constexpr size_t kHead = sizeof(size_t);  // struct_size itself stays as given
  std::memcpy(reinterpret_cast<char*>(out) + kHead, reinterpret_cast<const char*>(&full) + kHead,
              n - kHead);
  return absl::OkStatus();
}

inline Device& dev(sparkrt_device* d) { return *d->device; }

}  // namespace sparkrt::capi

// Every entry point checks its handle and out pointers first.
#define SPARKRT_C_REQUIRE(ptr)                                                          \
  do {                                                                                  \
    if ((ptr) == nullptr) return ::sparkrt::capi::to_c(                                 \
        ::sparkrt::capi::null_error(__func__, #ptr));                                   \
  } while (0)

#endif  // SPARKRT_CAPI_C_API_INTERNAL_H_
