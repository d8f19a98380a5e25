// KernelLaunch: the fluent builder every op wrapper is written with.
//
//   return KernelLaunch(dev, kernel)
//       .grid({div_ceil(count, 256u)})
//       .block({256})
//       .arg(slots).arg(block_table).arg(start_pos).arg(count)
//       .launch(stream);
//
// Arguments are copied into an inline buffer in the CUDA parameter layout
// (each at its natural alignment), so the builder never allocates. launch()
// checks the arguments against the kernel's PTX signature (count, sizes,
// offsets and kinds) and the launch dimensions against the device's limits
// and the entry's .reqntid/.maxntid, on every backend, then makes one call
// through the plugin.
//
// arg() maps C++ types exactly: DevicePtr -> pointer, uint32_t -> .u32,
// int32_t -> .s32, uint64_t -> .u64, int64_t -> .s64, float -> .f32,
// double -> .f64, any other trivially copyable struct -> its bytes. bool,
// 8/16-bit integers and enums are refused at compile time; convert them to the
// type the kernel declares. The kind must fit the declared type: .f32/.f64
// take only float/double, .u*/.s* integers of their width in either
// signedness (64-bit ones also DevicePtr), .b* anything of their width, an
// array (.b8 name[N], a CUDA struct) only a struct; a 1- or 2-byte parameter
// takes a struct of that size.
#ifndef SPARKRT_KERNEL_LAUNCH_H_
#define SPARKRT_KERNEL_LAUNCH_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "absl/status/status.h"
#include "sparkrt/device.h"
#include "sparkrt/types.h"

namespace sparkrt {

// How an argument was given; values equal SparkrtArgKind in plugin_api.h.
enum class ArgKind : uint8_t { kPtr = 1, kU32, kI32, kU64, kI64, kF32, kF64, kBytes };

template <typename T>
constexpr ArgKind arg_kind_of() {
  static_assert(std::is_trivially_copyable_v<T>, "kernel arguments must be trivially copyable");
  static_assert(!std::is_same_v<T, bool>, "pass bool as uint32_t (PTX has no bool parameter)");
  static_assert(!std::is_enum_v<T>, "pass enums as the integer type the kernel declares");
  static_assert(!std::is_pointer_v<T>, "host pointers cannot be kernel arguments; use DevicePtr");
  if constexpr (std::is_same_v<T, DevicePtr>) {
    return ArgKind::kPtr;
  } else if constexpr (std::is_integral_v<T>) {
    static_assert(sizeof(T) == 4 || sizeof(T) == 8,
                  "8/16-bit integers: pass the 32-bit type the kernel declares");
    if constexpr (sizeof(T) == 4) return std::is_signed_v<T> ? ArgKind::kI32 : ArgKind::kU32;
    return std::is_signed_v<T> ? ArgKind::kI64 : ArgKind::kU64;
  } else if constexpr (std::is_same_v<T, float>) {
    return ArgKind::kF32;
  } else if constexpr (std::is_same_v<T, double>) {
    return ArgKind::kF64;
  } else {
    static_assert(std::is_class_v<T>, "unsupported kernel argument type");
    return ArgKind::kBytes;
  }
}

class KernelLaunch {
 public:
  static constexpr uint32_t kMaxArgs = 64;
  static constexpr uint32_t kMaxParamBytes = 4096;  // CUDA's classic parameter limit

  KernelLaunch(Device& device, Kernel kernel) : device_(&device), kernel_(kernel) {}

  KernelLaunch& grid(Dim3 g) {
    grid_ = g;
    return *this;
  }
  KernelLaunch& block(Dim3 b) {
    block_ = b;
    return *this;
  }
  // Dynamic shared memory in bytes.
  KernelLaunch& shared_mem(uint32_t bytes) {
    shared_mem_ = bytes;
    return *this;
  }
  // Programmatic dependent launch: the kernel may start before the previous
  // kernel on its stream has finished, and waits (griddepcontrol.wait) where
  // it reads that kernel's output. Backends that cannot overlap launches run
  // it as a plain launch. Needs a plugin of ABI 1.4 (FAILED_PRECONDITION
  // otherwise).
  KernelLaunch& dependent_launch(bool on = true) {
    flags_ = on ? flags_ | SPARKRT_LAUNCH_DEPENDENT : flags_ & ~SPARKRT_LAUNCH_DEPENDENT;
    return *this;
  }
  // Thread-block cluster, in blocks; {0, 0, 0} (the default) is none. Every
  // dimension at least 1 and dividing the grid's, at most
  // DeviceProperties::max_cluster_size blocks in all; UNIMPLEMENTED on a
  // device without supports_clusters.
  KernelLaunch& cluster(Dim3 c) {
    cluster_ = c;
    return *this;
  }

  template <typename T>
  KernelLaunch& arg(const T& value) {
    constexpr ArgKind kind = arg_kind_of<T>();
    push(&value, sizeof(T), alignof(T), kind);
    return *this;
  }

  // A struct whose type is known only at run time (language bindings):
  // `size` bytes at `data`, placed at the next multiple of `align`, which
  // must be a power of two up to 128 (launch() refuses anything else).
  KernelLaunch& arg_bytes(const void* data, uint32_t size, uint32_t align) {
    if (align == 0 || align > 128 || (align & (align - 1)) != 0) {
      if (bad_align_ == 0) bad_align_ = align == 0 ? UINT32_MAX : align;
      return *this;
    }
    push(data, size, align, ArgKind::kBytes);
    return *this;
  }

  // For language bindings (the C API), which learn the argument kinds at run
  // time: the layout of an argument list that passed the kernel's signature
  // check, kept to launch later lists of the same kinds without packing and
  // checking them again.
  struct CheckedLayout {
    const void* kernel = nullptr;  // the kernel it was checked against
    uint32_t num_args = 0;
    uint32_t params_size = 0;
    uint32_t offsets[kMaxArgs];
    uint32_t sizes[kMaxArgs];
    uint8_t kinds[kMaxArgs];
  };
  // OK, with the layout of the arguments given so far in `out`, when they fit
  // the kernel's signature; otherwise the error launch() would return.
  absl::Status check_layout(CheckedLayout& out) const;
  // Takes `layout` (which must outlive the launch) instead of arg() calls
  // and returns the parameter buffer, where the caller writes argument i's
  // layout.sizes[i] bytes at layout.offsets[i]. launch() then skips the
  // signature check the layout passed, and refuses a layout of another
  // kernel.
  std::byte* use_layout(const CheckedLayout& layout) {
    layout_ = &layout;
    return params_;
  }

  // Checks and submits on `stream` (default: the default stream). Does not
  // wait for the kernel. May be called again to launch the same arguments.
  absl::Status launch(Stream stream = {}) const;

  uint32_t num_args() const { return num_args_; }
  const std::byte* params() const { return params_; }
  uint32_t params_size() const { return params_size_; }

 private:
  absl::Status signature_error(const detail::KernelRecord& k) const;
  // Everything launch() checks of the arguments; OK when they fit.
  absl::Status check_args(const detail::KernelRecord& k) const;
  absl::Status limits_error(const detail::KernelRecord& k, const DeviceProperties& props) const;
  // The checks of dependent_launch() and cluster(), for a launch that asks
  // for either.
  absl::Status check_attributes(const detail::KernelRecord& k,
                                const detail::DeviceState& s) const;

  void push(const void* data, uint32_t size, uint32_t align, ArgKind kind) {
    const uint32_t offset = (params_size_ + align - 1) & ~(align - 1);
    if (num_args_ >= kMaxArgs || offset + size > kMaxParamBytes) {
      overflow_ = true;
      return;
    }
    std::memcpy(params_ + offset, data, size);
    offsets_[num_args_] = offset;
    sizes_[num_args_] = size;
    kinds_[num_args_] = static_cast<uint8_t>(kind);
    aligns_[num_args_] = static_cast<uint8_t>(align);
    ++num_args_;
    params_size_ = offset + size;
  }

  Device* device_;
  Kernel kernel_;
  Dim3 grid_{0, 0, 0};  // must be set
  Dim3 block_{0, 0, 0};
  uint32_t shared_mem_ = 0;
  uint32_t flags_ = 0;       // SPARKRT_LAUNCH_* bits
  Dim3 cluster_{0, 0, 0};    // none
  uint32_t num_args_ = 0;
  uint32_t params_size_ = 0;
  bool overflow_ = false;
  const CheckedLayout* layout_ = nullptr;  // use_layout(): stands in for the arrays below
  uint32_t bad_align_ = 0;  // the first alignment arg_bytes refused (0 is UINT32_MAX)
  uint32_t offsets_[kMaxArgs];
  uint32_t sizes_[kMaxArgs];
  uint8_t kinds_[kMaxArgs];
  uint8_t aligns_[kMaxArgs];
  alignas(16) std::byte params_[kMaxParamBytes];
};

}  // namespace sparkrt

#endif  // SPARKRT_KERNEL_LAUNCH_H_
