// example_host: a complete sparkrt backend plugin in one file, written
// against the plugin SDK only. Device memory is host memory behind the SDK's
// checked address space (sparkrt/sdk/address_space.h, library
// sparkrt::plugin_support), and the two kernels it runs, vector_add_f32 and
// fill_u32 (the vector_ops module), run on the calling thread. It passes `sparkrt conformance`, which skips the
// graph cases because it offers no sparkrt.graph.v1. It shows what a backend
// implements; a real one talks to a driver instead.
//
// Every operation completes before it returns, so work on a stream runs in
// order trivially, streams are plain handles, and an event holds the time at
// which it was recorded.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>

#include "sparkrt/plugin_sdk.h"
#include "sparkrt/sdk/address_space.h"

namespace {

namespace sdk = sparkrt::sdk;

constexpr uint64_t kTotalMemory = 1ull << 30;  // what the device claims to have
// Device addresses are not host addresses: each device has its own range, so
// a pointer of another device, or a host pointer, is caught.
constexpr uint64_t kAddressBase = 0x5f0000000000;
constexpr uint64_t kAddressSpan = 1ull << 40;

// The kernels this backend implements.
enum class Entry { kVectorAdd, kFill };

class HostKernel final : public sdk::Kernel {
 public:
  explicit HostKernel(Entry e) : entry(e) {}
  const Entry entry;
};

class HostModule final : public sdk::Module {
 public:
  // The runtime passes the signature it parsed from the PTX; check it against
  // the one this backend implements rather than trusting the name alone.
  absl::StatusOr<sdk::Kernel*> get_kernel(std::string_view entry,
                                          std::span<const SparkrtParamInfo> params) override {
    if (entry == "vector_add_f32") {
      if (!sizes_are(params, {8, 8, 8, 4})) {
        return absl::InvalidArgumentError(
            "example_host: vector_add_f32 must be (.u64 a, .u64 b, .u64 out, .u32 n)");
      }
      return &vector_add_;
    }
    if (entry == "fill_u32") {
      if (!sizes_are(params, {8, 4, 4})) {
        return absl::InvalidArgumentError(
            "example_host: fill_u32 must be (.u64 out, .u32 value, .u32 n)");
      }
      return &fill_;
    }
    return absl::UnimplementedError("example_host runs only vector_add_f32 and fill_u32, not " +
                                    std::string(entry));
  }

 private:
  static bool sizes_are(std::span<const SparkrtParamInfo> params,
                        std::initializer_list<uint32_t> sizes) {
    return std::equal(params.begin(), params.end(), sizes.begin(), sizes.end(),
                      [](const SparkrtParamInfo& p, uint32_t size) { return p.size == size; });
  }

  HostKernel vector_add_{Entry::kVectorAdd};
  HostKernel fill_{Entry::kFill};
};

// One lock guards everything; every call takes it first.
class HostDevice final : public sdk::Device {
 public:
  explicit HostDevice(uint64_t serial)
      : memory_(kAddressBase + serial * kAddressSpan, kAddressSpan) {}

  absl::Status properties(SparkrtDeviceProperties& out) override {
    std::snprintf(out.name, sizeof(out.name), "%s", "sparkrt example host device");
    out.architecture[0] = '\0';
    out.total_memory = kTotalMemory;
    out.multiprocessor_count = 1;
    out.warp_size = 1;
    out.max_threads_per_block = 1024;
    out.max_block_dim[0] = 1024;
    out.max_block_dim[1] = 1024;
    out.max_block_dim[2] = 64;
    out.max_grid_dim[0] = 0x7fffffffu;
    out.max_grid_dim[1] = 65535;
    out.max_grid_dim[2] = 65535;
    // What a launch may ask for; these kernels use none.
    out.max_shared_memory_per_block = 48 * 1024;
    out.max_shared_memory_per_block_optin = 48 * 1024;
    out.compute_capability_major = 0;
    out.compute_capability_minor = 0;
    // It runs no device code: the runtime offers the PTX, or the signature
    // file where there is no PTX (a build without nvcc).
    out.image_formats = (1u << SPARKRT_IMAGE_PTX) | (1u << SPARKRT_IMAGE_SIGNATURES);
    return absl::OkStatus();
  }

  absl::StatusOr<std::unique_ptr<sdk::Module>> load_module(
      std::string_view, SparkrtImageFormat format, std::span<const std::byte>) override {
    if (format != SPARKRT_IMAGE_PTX && format != SPARKRT_IMAGE_SIGNATURES)
      return absl::InvalidArgumentError("example_host takes PTX or a signature file");
    return std::make_unique<HostModule>();
  }

  absl::StatusOr<SparkrtDevicePtr> alloc(uint64_t bytes) override {
    std::lock_guard lock(mu_);
    if (bytes > kTotalMemory - memory_.live_bytes()) {
      return absl::ResourceExhaustedError("example_host: out of device memory");
    }
    auto allocation = memory_.allocate(bytes);
    if (!allocation.ok()) return allocation.status();
    return (*allocation)->base;
  }

  absl::Status free(SparkrtDevicePtr ptr) override {
    std::lock_guard lock(mu_);
    return memory_.release(ptr).status();
  }

  absl::Status memset(SparkrtDevicePtr dst, uint8_t value, uint64_t bytes, SparkrtStream stream,
                      bool) override {
    std::lock_guard lock(mu_);
    if (auto s = check_stream(stream); !s.ok()) return s;
    return memory_.fill(dst, value, bytes);
  }

  absl::Status memcpy(const SparkrtMemcpyArgs& copy) override {
    std::lock_guard lock(mu_);
    if (auto s = check_stream(copy.stream); !s.ok()) return s;
    return memory_.copy(copy);
  }

  absl::StatusOr<SparkrtStream> create_stream() override {
    std::lock_guard lock(mu_);
    const SparkrtStream stream = ++next_handle_;
    streams_.insert(stream);
    return stream;
  }
  absl::Status destroy_stream(SparkrtStream stream) override {
    std::lock_guard lock(mu_);
    if (streams_.erase(stream) == 1) return absl::OkStatus();
    return unknown("stream", stream);
  }
  absl::Status synchronize(SparkrtStream stream) override {
    std::lock_guard lock(mu_);
    return check_stream(stream);
  }

  absl::StatusOr<SparkrtEvent> create_event() override {
    std::lock_guard lock(mu_);
    const SparkrtEvent event = ++next_handle_;  // handles are never reissued
    events_[event] = std::nullopt;
    return event;
  }
  absl::Status destroy_event(SparkrtEvent event) override {
    std::lock_guard lock(mu_);
    if (events_.erase(event) == 1) return absl::OkStatus();
    return unknown("event", event);
  }
  absl::Status record_event(SparkrtEvent event, SparkrtStream stream) override {
    std::lock_guard lock(mu_);
    if (auto s = check_stream(stream); !s.ok()) return s;
    auto it = events_.find(event);
    if (it == events_.end()) return unknown("event", event);
    it->second = Clock::now();  // the work before it is done: every call is synchronous
    return absl::OkStatus();
  }
  absl::Status synchronize_event(SparkrtEvent event) override {
    std::lock_guard lock(mu_);
    return check_event(event);
  }
  absl::Status wait_event(SparkrtStream stream, SparkrtEvent event) override {
    std::lock_guard lock(mu_);
    if (auto s = check_stream(stream); !s.ok()) return s;
    return check_event(event);
  }
  absl::StatusOr<float> elapsed_ms(SparkrtEvent start, SparkrtEvent end) override {
    std::lock_guard lock(mu_);
    std::optional<Clock::time_point> times[2];
    for (int i = 0; i < 2; ++i) {
      const SparkrtEvent event = i == 0 ? start : end;
      auto it = events_.find(event);
      if (it == events_.end()) return unknown("event", event);
      if (!it->second) {
        return absl::FailedPreconditionError("example_host: elapsed_ms: event " +
                                             std::to_string(event) + " has not been recorded");
      }
      times[i] = it->second;
    }
    return std::chrono::duration<float, std::milli>(*times[1] - *times[0]).count();
  }

  // The runtime has checked the arguments against the PTX signature and the
  // geometry against the properties; the pointers are still checked here, as
  // a GPU's memory protection would. The lock is held while the kernel runs,
  // so its buffers cannot be freed under it.
  absl::Status launch(const sdk::Launch& l) override {
    std::lock_guard lock(mu_);
    if (auto s = check_stream(l.stream); !s.ok()) return s;
    const uint32_t n = arg<uint32_t>(l, l.arg_offsets.size() - 1);  // both end with n
    // One thread per element along x; threads with i >= n do nothing.
    const uint64_t count = std::min<uint64_t>(n, uint64_t{l.grid[0]} * l.block[0]);
    if (count == 0) return absl::OkStatus();
    switch (static_cast<const HostKernel*>(l.kernel)->entry) {
      case Entry::kVectorAdd: {
        auto a = buffer<const float>(l, 0, count, "vector_add_f32 a");
        if (!a.ok()) return a.status();
        auto b = buffer<const float>(l, 1, count, "vector_add_f32 b");
        if (!b.ok()) return b.status();
        auto out = buffer<float>(l, 2, count, "vector_add_f32 out");
        if (!out.ok()) return out.status();
        for (uint64_t i = 0; i < count; ++i) (*out)[i] = (*a)[i] + (*b)[i];
        return absl::OkStatus();
      }
      case Entry::kFill: {
        auto out = buffer<uint32_t>(l, 0, count, "fill_u32 out");
        if (!out.ok()) return out.status();
        std::fill_n(*out, count, arg<uint32_t>(l, 1));
        return absl::OkStatus();
      }
    }
    return absl::InternalError("example_host: unknown kernel");
  }

 private:
  using Clock = std::chrono::steady_clock;

  template <typename T>
  static T arg(const sdk::Launch& l, size_t i) {
    T value;
    std::memcpy(&value, l.params.data() + l.arg_offsets[i], sizeof value);
    return value;
  }

  // The host memory behind pointer argument `i`, which must hold `count`
  // elements of T in one live allocation.
  template <typename T>
  absl::StatusOr<T*> buffer(const sdk::Launch& l, size_t i, uint64_t count, const char* what) {
    auto p = memory_.resolve(arg<SparkrtDevicePtr>(l, i), count * sizeof(T), what);
    if (!p.ok()) return p.status();
    return reinterpret_cast<T*>(*p);
  }

  absl::Status check_stream(SparkrtStream stream) const {
    return stream == 0 || streams_.contains(stream) ? absl::OkStatus() : unknown("stream", stream);
  }
  absl::Status check_event(SparkrtEvent event) const {
    return events_.contains(event) ? absl::OkStatus() : unknown("event", event);
  }

  static absl::Status unknown(const char* what, uint64_t handle) {
    return absl::InvalidArgumentError(std::string("example_host: unknown ") + what + " " +
                                      std::to_string(handle));
  }

  std::mutex mu_;
  sdk::AddressSpace memory_;
  std::set<SparkrtStream> streams_;
  std::map<SparkrtEvent, std::optional<Clock::time_point>> events_;  // -> when recorded
  uint64_t next_handle_ = 0;
};

class HostBackend final : public sdk::Backend {
 public:
  absl::StatusOr<int> device_count() override { return 1; }
  absl::StatusOr<std::unique_ptr<sdk::Device>> open_device(int index) override {
    if (index != 0) return absl::OutOfRangeError("example_host has one device, index 0");
    return std::make_unique<HostDevice>(opened_++);
  }

 private:
  std::atomic<uint64_t> opened_{0};  // devices opened so far: each gets its own address range
};

}  // namespace

SPARKRT_DEFINE_PLUGIN(HostBackend, "example_host", "0.1.0")
