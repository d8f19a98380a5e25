// Reference implementations of the kernel modules: plain C++ that computes
// what each kernel's contract in docs/kernels.md says, run by the cpu backend
// with the very launch arguments a GPU would get.
//
// A reference is registered by module and entry:
//
//   SPARKRT_REFERENCE_KERNEL(vector_ops, vector_add_f32) {
//     const uint32_t n = launch.value<uint32_t>(3);
//     SPARKRT_ASSIGN_OR_RETURN(auto a, launch.span<const float>(0, n));
//     ...
//     return absl::OkStatus();
//   }
//
// Device pointers are resolved through the backend's memory with the extent
// the reference is about to touch, so a buffer too small for the launch's
// shapes is an error naming the argument, not a stray host access. A
// reference computes the whole launch at once; grid and block are available
// for kernels whose geometry carries meaning.
#ifndef SPARKRT_KERNELS_REFERENCE_REFERENCE_H_
#define SPARKRT_KERNELS_REFERENCE_REFERENCE_H_

#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "sparkrt/numeric.h"
#include "sparkrt/plugin_sdk.h"
#include "sparkrt/status_macros.h"

namespace sparkrt::reference {

// Device memory as the backend sees it.
class Memory {
 public:
  virtual ~Memory() = default;
  // Host storage for [ptr, ptr + bytes), which must lie in one live
  // allocation; `what` names the operand in messages.
  virtual absl::StatusOr<std::byte*> resolve(uint64_t ptr, uint64_t bytes, std::string_view what) = 0;
};

// A launch as a reference sees it. Argument indices and types follow the
// kernel's PTX signature, which the runtime has checked.
class Launch {
 public:
  Launch(const sdk::Launch& l, Memory& memory, std::string_view entry)
      : l_(l), memory_(memory), entry_(entry) {}

  template <typename T>
  T value(uint32_t i) const {
    T v;
    std::memcpy(&v, l_.params.data() + l_.arg_offsets[i], sizeof(T));
    return v;
  }
  uint64_t address(uint32_t i) const { return value<uint64_t>(i); }

  // Argument i as `count` elements of T; count 0 yields an empty span (and
  // accepts a null pointer).
  template <typename T>
  absl::StatusOr<std::span<T>> span(uint32_t i, uint64_t count) const {
    const uint64_t ptr = address(i);
    if (count == 0) return std::span<T>();
    auto host = memory_.resolve(ptr, count * sizeof(T), operand(i));
    if (!host.ok()) return host.status();
    return std::span<T>(reinterpret_cast<T*>(*host), count);
  }

  const std::array<uint32_t, 3>& grid() const { return l_.grid; }
  const std::array<uint32_t, 3>& block() const { return l_.block; }
  uint32_t shared_memory_bytes() const { return l_.shared_memory_bytes; }
  std::string_view entry() const { return entry_; }

 private:
  std::string operand(uint32_t i) const {
    return std::string(entry_) + " argument #" + std::to_string(i);
  }

  const sdk::Launch& l_;
  Memory& memory_;
  std::string_view entry_;
};

using KernelFn = absl::Status (*)(const Launch& launch);

struct Registration {
  const char* module;
  const char* entry;
  KernelFn fn;
  const Registration* next;
};

// The reference for module.entry, or nullptr.
KernelFn find(std::string_view module, std::string_view entry);

// Every registered reference (a linked list, in no particular order).
const Registration* all();

namespace detail {
struct Registrar {
  explicit Registrar(Registration* r);
};
}  // namespace detail

// The number formats by their plain names, in the references' namespace and
// in every kernel body that uses it.
using namespace ::sparkrt::numeric;  // NOLINT(build/namespaces)

}  // namespace sparkrt::reference

#define SPARKRT_REFERENCE_KERNEL(module, entry)                                               \
  static absl::Status sparkrt_ref_##module##_##entry(const ::sparkrt::reference::Launch&);    \
  static ::sparkrt::reference::Registration sparkrt_ref_reg_##module##_##entry{               \
      #module, #entry, &sparkrt_ref_##module##_##entry, nullptr};                              \
  static const ::sparkrt::reference::detail::Registrar sparkrt_ref_registrar_##module##_##entry( \
      &sparkrt_ref_reg_##module##_##entry);                                                    \
  static absl::Status sparkrt_ref_##module##_##entry(                                          \
      [[maybe_unused]] const ::sparkrt::reference::Launch& launch)

#endif  // SPARKRT_KERNELS_REFERENCE_REFERENCE_H_
