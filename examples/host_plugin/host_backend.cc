// example_host: a complete sparkrt backend plugin in one file, written
// against the plugin SDK only. Device memory is host memory and the one
// kernel it can run, vector_add_f32, runs on the calling thread. It shows
// what a backend implements; a real one talks to a driver instead.
//
// Every operation is synchronous, so streams and events are plain handles:
// work is complete when the call returns.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "sparkrt/plugin_sdk.h"

namespace {

namespace sdk = sparkrt::sdk;

constexpr uint64_t kTotalMemory = 1ull << 30;  // what the device claims to have

class HostKernel final : public sdk::Kernel {};

class HostModule final : public sdk::Module {
 public:
  // The runtime passes the signature it parsed from the PTX; check it against
  // the one this backend implements rather than trusting the name alone.
  absl::StatusOr<sdk::Kernel*> get_kernel(std::string_view entry,
                                          std::span<const SparkrtParamInfo> params) override {
    if (entry != "vector_add_f32") {
      return absl::UnimplementedError("example_host runs only vector_add_f32, not " +
                                      std::string(entry));
    }
    constexpr uint32_t kSizes[] = {8, 8, 8, 4};
    bool matches = params.size() == 4;
    for (size_t i = 0; matches && i < 4; ++i) matches = params[i].size == kSizes[i];
    if (!matches) {
      return absl::InvalidArgumentError(
          "example_host: vector_add_f32 must be (.u64 a, .u64 b, .u64 out, .u32 n)");
    }
    return &vector_add_;
  }

 private:
  HostKernel vector_add_;
};

class HostDevice final : public sdk::Device {
 public:
  ~HostDevice() override {
    for (const auto& [addr, size] : allocations_) std::free(reinterpret_cast<void*>(addr));
  }

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
    out.max_shared_memory_per_block = 0;
    out.max_shared_memory_per_block_optin = 0;
    out.compute_capability_major = 0;
    out.compute_capability_minor = 0;
    out.image_formats = 1u << SPARKRT_IMAGE_PTX;  // the runtime then offers PTX
    return absl::OkStatus();
  }

  absl::StatusOr<std::unique_ptr<sdk::Module>> load_module(
      std::string_view, SparkrtImageFormat format, std::span<const std::byte>) override {
    if (format != SPARKRT_IMAGE_PTX) return absl::InvalidArgumentError("example_host takes PTX");
    return std::make_unique<HostModule>();
  }

  absl::StatusOr<SparkrtDevicePtr> alloc(uint64_t bytes) override {
    std::lock_guard lock(mu_);
    if (bytes > kTotalMemory - live_bytes_) {
      return absl::ResourceExhaustedError("example_host: out of device memory");
    }
    // Rounded up: aligned_alloc wants a multiple of the alignment.
    void* p = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
    if (p == nullptr) return absl::ResourceExhaustedError("example_host: out of host memory");
    const auto addr = reinterpret_cast<SparkrtDevicePtr>(p);
    allocations_[addr] = bytes;
    live_bytes_ += bytes;
    return addr;
  }

  absl::Status free(SparkrtDevicePtr ptr) override {
    std::lock_guard lock(mu_);
    auto it = allocations_.find(ptr);
    if (it == allocations_.end()) {
      return absl::InvalidArgumentError("example_host: free of a pointer alloc did not return");
    }
    live_bytes_ -= it->second;
    std::free(reinterpret_cast<void*>(ptr));
    allocations_.erase(it);
    return absl::OkStatus();
  }

  absl::Status memset(SparkrtDevicePtr dst, uint8_t value, uint64_t bytes, SparkrtStream stream,
                      bool) override {
    if (auto s = check_stream(stream); !s.ok()) return s;
    if (auto s = check_range(dst, bytes, "memset"); !s.ok()) return s;
    std::memset(reinterpret_cast<void*>(dst), value, bytes);
    return absl::OkStatus();
  }

  absl::Status memcpy(const SparkrtMemcpyArgs& copy) override {
    if (auto s = check_stream(copy.stream); !s.ok()) return s;
    void* dst = copy.dst_host;
    const void* src = copy.src_host;
    if (copy.kind != SPARKRT_COPY_D2H) {
      if (auto s = check_range(copy.dst_device, copy.bytes, "copy destination"); !s.ok()) return s;
      dst = reinterpret_cast<void*>(copy.dst_device);
    }
    if (copy.kind != SPARKRT_COPY_H2D) {
      if (auto s = check_range(copy.src_device, copy.bytes, "copy source"); !s.ok()) return s;
      src = reinterpret_cast<const void*>(copy.src_device);
    }
    std::memmove(dst, src, copy.bytes);
    return absl::OkStatus();
  }

  absl::StatusOr<SparkrtStream> create_stream() override { return add_handle(streams_); }
  absl::Status destroy_stream(SparkrtStream stream) override {
    return remove_handle(streams_, stream, "stream");
  }
  absl::Status synchronize(SparkrtStream stream) override { return check_stream(stream); }

  absl::StatusOr<SparkrtEvent> create_event() override { return add_handle(events_); }
  absl::Status destroy_event(SparkrtEvent event) override {
    return remove_handle(events_, event, "event");
  }
  absl::Status record_event(SparkrtEvent event, SparkrtStream stream) override {
    if (auto s = check_stream(stream); !s.ok()) return s;
    return check_handle(events_, event, "event");
  }
  absl::Status synchronize_event(SparkrtEvent event) override {
    return check_handle(events_, event, "event");
  }
  absl::Status wait_event(SparkrtStream stream, SparkrtEvent event) override {
    if (auto s = check_stream(stream); !s.ok()) return s;
    return check_handle(events_, event, "event");
  }
  absl::StatusOr<float> elapsed_ms(SparkrtEvent, SparkrtEvent) override {
    return absl::UnimplementedError("example_host does not time work");
  }

  // The runtime has checked the arguments against the PTX signature; the
  // pointers are still checked here, as a GPU's memory protection would.
  absl::Status launch(const sdk::Launch& l) override {
    if (auto s = check_stream(l.stream); !s.ok()) return s;
    if (l.arg_offsets.size() != 4 || l.params.size() < 28) {
      return absl::InvalidArgumentError("example_host: vector_add_f32 takes 4 arguments");
    }
    uint64_t a, b, out;
    uint32_t n;
    std::memcpy(&a, l.params.data() + l.arg_offsets[0], sizeof a);
    std::memcpy(&b, l.params.data() + l.arg_offsets[1], sizeof b);
    std::memcpy(&out, l.params.data() + l.arg_offsets[2], sizeof out);
    std::memcpy(&n, l.params.data() + l.arg_offsets[3], sizeof n);
    const uint64_t threads = uint64_t{l.grid[0]} * l.block[0];
    const uint64_t count = std::min<uint64_t>(n, threads);  // threads with i >= n do nothing
    for (uint64_t p : {a, b, out}) {
      if (auto s = check_range(p, count * sizeof(float), "vector_add_f32 argument"); !s.ok()) return s;
    }
    const auto* fa = reinterpret_cast<const float*>(a);
    const auto* fb = reinterpret_cast<const float*>(b);
    auto* fo = reinterpret_cast<float*>(out);
    for (uint64_t i = 0; i < count; ++i) fo[i] = fa[i] + fb[i];
    return absl::OkStatus();
  }

 private:
  absl::Status check_range(SparkrtDevicePtr ptr, uint64_t bytes, const char* what) {
    std::lock_guard lock(mu_);
    auto it = allocations_.upper_bound(ptr);
    if (it != allocations_.begin()) {
      --it;
      if (ptr - it->first <= it->second && bytes <= it->second - (ptr - it->first)) {
        return absl::OkStatus();
      }
    }
    return absl::OutOfRangeError(std::string("example_host: ") + what +
                                 " is not inside a live allocation");
  }

  absl::Status check_stream(SparkrtStream stream) {
    return stream == 0 ? absl::OkStatus() : check_handle(streams_, stream, "stream");
  }

  uint64_t add_handle(std::set<uint64_t>& set) {
    std::lock_guard lock(mu_);
    const uint64_t handle = ++next_handle_;
    set.insert(handle);
    return handle;
  }
  absl::Status check_handle(std::set<uint64_t>& set, uint64_t handle, const char* what) {
    std::lock_guard lock(mu_);
    if (set.contains(handle)) return absl::OkStatus();
    return absl::InvalidArgumentError(std::string("example_host: unknown ") + what + " " +
                                      std::to_string(handle));
  }
  absl::Status remove_handle(std::set<uint64_t>& set, uint64_t handle, const char* what) {
    std::lock_guard lock(mu_);
    if (set.erase(handle) == 1) return absl::OkStatus();
    return absl::InvalidArgumentError(std::string("example_host: unknown ") + what + " " +
                                      std::to_string(handle));
  }

  std::mutex mu_;
  std::map<SparkrtDevicePtr, uint64_t> allocations_;  // base -> bytes
  uint64_t live_bytes_ = 0;
  std::set<uint64_t> streams_, events_;
  uint64_t next_handle_ = 0;
};

class HostBackend final : public sdk::Backend {
 public:
  absl::StatusOr<int> device_count() override { return 1; }
  absl::StatusOr<std::unique_ptr<sdk::Device>> open_device(int index) override {
    if (index != 0) return absl::OutOfRangeError("example_host has one device, index 0");
    return std::make_unique<HostDevice>();
  }
};

}  // namespace

SPARKRT_DEFINE_PLUGIN(HostBackend, "example_host", "0.1.0")
