#include "cpu_device.h"

#include <unistd.h>

#include <cstdio>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace sparkrt::cpu {
namespace {

constexpr uint64_t kAddressBase = 0x6f0000000000;
constexpr uint64_t kAddressSpan = uint64_t{1} << 40;

// Reference memory seen through the device's address space; the caller holds
// the device lock for the whole launch.
class AddressSpaceMemory final : public reference::Memory {
 public:
  explicit AddressSpaceMemory(sdk::AddressSpace& space) : space_(space) {}
  absl::StatusOr<std::byte*> resolve(uint64_t ptr, uint64_t bytes, std::string_view what) override {
    return space_.resolve(ptr, bytes, what);
  }

 private:
  sdk::AddressSpace& space_;
};

}  // namespace

absl::StatusOr<sdk::Kernel*> CpuModule::get_kernel(std::string_view entry,
                                                   std::span<const SparkrtParamInfo>) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string key(entry);
  if (auto it = kernels_.find(key); it != kernels_.end()) return it->second.get();
  reference::KernelFn fn = reference::find(name_, entry);
  if (fn == nullptr) {
    std::vector<std::string> known;
    for (const auto* r = reference::all(); r != nullptr; r = r->next)
      if (name_ == r->module) known.push_back(r->entry);
    return absl::UnimplementedError(absl::StrFormat(
        "cpu: kernel %s.%s has no reference implementation (references in this module: [%s]); "
        "add one in kernels/reference/ or use a GPU backend",
        name_, entry, absl::StrJoin(known, ", ")));
  }
  auto kernel = std::make_unique<CpuKernel>(name_, key, fn);
  sdk::Kernel* handle = kernel.get();
  kernels_.emplace(key, std::move(kernel));
  return handle;
}

CpuDevice::CpuDevice(uint64_t serial, int index)
    : sdk::HostCollectiveDevice(*this, index),
      memory_(kAddressBase + serial * kAddressSpan, kAddressSpan) {}

absl::Status CpuDevice::properties(SparkrtDeviceProperties& out) {
  std::snprintf(out.name, sizeof(out.name), "sparkrt cpu reference device");
  out.architecture[0] = '\0';
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGE_SIZE);
  out.total_memory = pages > 0 && page_size > 0 ? uint64_t(pages) * uint64_t(page_size) : 0;
  out.multiprocessor_count = 1;
  out.warp_size = 32;
  // GPU-like limits, so a launch that passes here is valid on a GPU too.
  out.max_threads_per_block = 1024;
  out.max_block_dim[0] = 1024;
  out.max_block_dim[1] = 1024;
  out.max_block_dim[2] = 64;
  out.max_grid_dim[0] = 0x7fffffff;
  out.max_grid_dim[1] = 65535;
  out.max_grid_dim[2] = 65535;
  out.max_shared_memory_per_block = 48 * 1024;
  out.max_shared_memory_per_block_optin = 227 * 1024;
  out.compute_capability_major = 0;
  out.compute_capability_minor = 0;
  out.image_formats = (1u << SPARKRT_IMAGE_PTX) | (1u << SPARKRT_IMAGE_SIGNATURES);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<sdk::Module>> CpuDevice::load_module(
    std::string_view name, SparkrtImageFormat format, std::span<const std::byte>) {
  if (format != SPARKRT_IMAGE_PTX && format != SPARKRT_IMAGE_SIGNATURES)
    return absl::InvalidArgumentError(absl::StrFormat(
        "cpu: module %s: only PTX and signature images are accepted", name));
  // Nothing of the image is executed: entries resolve to reference
  // implementations.
  return std::make_unique<CpuModule>(std::string(name));
}

absl::StatusOr<SparkrtDevicePtr> CpuDevice::alloc(uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  auto a = memory_.allocate(bytes);
  if (!a.ok()) return a.status();
  return (*a)->base;
}

absl::Status CpuDevice::free(SparkrtDevicePtr ptr) {
  std::lock_guard<std::mutex> lock(mu_);
  return memory_.release(ptr).status();
}

absl::Status CpuDevice::memset(SparkrtDevicePtr dst, uint8_t value, uint64_t bytes,
                               SparkrtStream stream, bool blocking) {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto s = check_stream_locked(stream); !s.ok()) return s;
  if (!blocking && graphs_.capturing(stream)) return graphs_.capture_memset(stream, dst, value, bytes);
  return memory_.fill(dst, value, bytes);
}

absl::Status CpuDevice::memcpy(const SparkrtMemcpyArgs& c) {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto s = check_stream_locked(c.stream); !s.ok()) return s;
  if (!c.blocking && graphs_.capturing(c.stream)) return graphs_.capture_copy(c.stream, c);
  return memory_.copy(c);
}

absl::Status CpuDevice::check_stream(SparkrtStream stream) {
  std::lock_guard<std::mutex> lock(mu_);
  return check_stream_locked(stream);
}

absl::Status CpuDevice::with_collective_memory(SparkrtStream stream, std::string_view call,
                                              CollectiveMemoryFn fn) {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto s = check_stream_locked(stream); !s.ok()) return s;
  if (graphs_.capturing(stream))
    return absl::FailedPreconditionError(absl::StrFormat(
        "cpu: %s on stream %d, which is capturing a graph: collectives are not recorded into "
        "graphs on this backend; issue them outside the capture",
        call, stream));
  return fn(memory_);
}

absl::Status CpuDevice::check_stream_locked(SparkrtStream stream) const {
  if (stream == 0 || streams_.contains(stream)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrFormat(
      "cpu: unknown stream %d (never created on this device, or destroyed)", stream));
}

absl::Status CpuDevice::check_event(SparkrtEvent event) const {
  if (events_.contains(event)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrFormat(
      "cpu: unknown event %d (never created on this device, or destroyed)", event));
}

absl::StatusOr<SparkrtStream> CpuDevice::create_stream() {
  std::lock_guard<std::mutex> lock(mu_);
  const SparkrtStream s = next_stream_++;
  streams_.insert(s);
  return s;
}

absl::Status CpuDevice::destroy_stream(SparkrtStream stream) {
  std::lock_guard<std::mutex> lock(mu_);
  if (stream == 0)
    return absl::InvalidArgumentError("cpu: the default stream (0) cannot be destroyed");
  if (streams_.erase(stream) == 0) return check_stream_locked(stream);
  return absl::OkStatus();
}

absl::Status CpuDevice::synchronize(SparkrtStream stream) {
  std::lock_guard<std::mutex> lock(mu_);
  return check_stream_locked(stream);  // all work is already complete
}

absl::StatusOr<SparkrtEvent> CpuDevice::create_event() {
  std::lock_guard<std::mutex> lock(mu_);
  const SparkrtEvent e = next_event_++;
  events_.emplace(e, std::nullopt);
  return e;
}

absl::Status CpuDevice::destroy_event(SparkrtEvent event) {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto s = check_event(event); !s.ok()) return s;
  events_.erase(event);
  return absl::OkStatus();
}

absl::Status CpuDevice::record_event(SparkrtEvent event, SparkrtStream stream) {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto s = check_event(event); !s.ok()) return s;
  if (auto s = check_stream_locked(stream); !s.ok()) return s;
  events_[event] = Clock::now();
  return absl::OkStatus();
}

absl::Status CpuDevice::synchronize_event(SparkrtEvent event) {
  std::lock_guard<std::mutex> lock(mu_);
  return check_event(event);
}

absl::Status CpuDevice::wait_event(SparkrtStream stream, SparkrtEvent event) {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto s = check_event(event); !s.ok()) return s;
  return check_stream_locked(stream);
}

absl::StatusOr<float> CpuDevice::elapsed_ms(SparkrtEvent start, SparkrtEvent end) {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto s = check_event(start); !s.ok()) return s;
  if (auto s = check_event(end); !s.ok()) return s;
  const auto& a = events_[start];
  const auto& b = events_[end];
  if (!a || !b)
    return absl::FailedPreconditionError(absl::StrFormat(
        "cpu: elapsed_ms(%d, %d): both events must be recorded first", start, end));
  return std::chrono::duration<float, std::milli>(*b - *a).count();
}

absl::Status CpuDevice::launch(const sdk::Launch& l) {
  const auto* kernel = static_cast<const CpuKernel*>(l.kernel);
  // A dependent launch runs as a plain one: launches here never overlap.
  if (l.cluster != std::array<uint32_t, 3>{0, 0, 0})
    return absl::UnimplementedError(absl::StrFormat(
        "launch(%s): the cpu backend has no thread-block clusters (cluster %d x %d x %d "
        "requested; supports_clusters is 0)",
        kernel->qualified, l.cluster[0], l.cluster[1], l.cluster[2]));
  std::lock_guard<std::mutex> lock(mu_);
  if (auto s = check_stream_locked(l.stream); !s.ok()) return s;
  if (graphs_.capturing(l.stream)) return graphs_.capture_launch(l.stream, l);
  AddressSpaceMemory memory(memory_);
  return kernel->fn(reference::Launch(l, memory, kernel->qualified));
}

}  // namespace sparkrt::cpu
