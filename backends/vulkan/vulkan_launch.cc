// Kernel launches of the Vulkan backend: parameters as push constants, or
// through a stream's argument ring where they do not fit.
#include <array>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>

#include "absl/strings/str_format.h"
#include "vulkan_device.h"
#include "vulkan_stream.h"

namespace sparkrt::vulkan {
namespace {

// A stream's argument ring (parameters too large for push constants): its
// size, and the alignment of each launch's copy (a cache line).
constexpr uint64_t kArgumentRingBytes = uint64_t{256} << 10;
constexpr uint64_t kArgumentAlign = 64;

}  // namespace

absl::StatusOr<uint64_t> VulkanDevice::copy_arguments(std::unique_lock<std::mutex>& lock,
                                                      const std::shared_ptr<Stream>& s,
                                                      std::span<const std::byte> params) {
  Stream::ArgumentRing& ring = s->arguments;
  if (ring.buffer == VK_NULL_HANDLE) {
    if (auto st = make_mapped_buffer(
            kArgumentRingBytes,
            VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_SHADER_DEVICE_ADDRESS_BIT, true,
            "argument ring", ring.buffer, ring.memory, ring.mapped);
        !st.ok())
      return st;
    auto where = vk_struct<VkBufferDeviceAddressInfo>(VK_STRUCTURE_TYPE_BUFFER_DEVICE_ADDRESS_INFO);
    where.buffer = ring.buffer;
    ring.address = vk_.vkGetBufferDeviceAddress(device_, &where);
  }
  const uint64_t bytes = (params.size() + kArgumentAlign - 1) / kArgumentAlign * kArgumentAlign;
  if (bytes > kArgumentRingBytes)
    return absl::InvalidArgumentError(absl::StrFormat(
        "vulkan: %d bytes of parameters is more than an argument ring holds (%d)", params.size(),
        kArgumentRingBytes));
  // Charged to the open batch, the one the launch goes into.
  const auto charge = [&](uint64_t n) {
    ring.used += n;
    if (ring.marks.empty() || ring.marks.back().value != s->submitted + 1)
      ring.marks.push_back({s->submitted + 1, 0});
    ring.marks.back().bytes += n;
  };
  for (;;) {
    uint64_t done = 0;
    if (VkResult r = vk_.vkGetSemaphoreCounterValue(device_, s->timeline, &done); r != VK_SUCCESS)
      return vk_error(r, "vkGetSemaphoreCounterValue (argument ring)");
    while (!ring.marks.empty() && ring.marks.front().value <= done) {
      ring.used -= ring.marks.front().bytes;
      ring.marks.pop_front();
    }
    if (ring.used == 0) ring.head = 0;
    // A copy does not straddle the end: the tail is skipped, and charged.
    const uint64_t skip = ring.head + bytes > kArgumentRingBytes ? kArgumentRingBytes - ring.head : 0;
    if (ring.used + skip + bytes <= kArgumentRingBytes) {
      if (skip > 0) {
        charge(skip);
        ring.head = 0;
      }
      const uint64_t at = ring.head;
      std::memcpy(ring.mapped + at, params.data(), params.size());
      ring.head += bytes;
      charge(bytes);
      return ring.address + at;
    }
    // Full: wait for the oldest batch that holds a copy (submitting it
    // first when it is the open one).
    const uint64_t oldest = ring.marks.front().value;
    if (oldest == s->submitted + 1) {
      if (auto st = submit(*s); !st.ok()) return st;
    }
    lock.unlock();
    const absl::Status waited = wait(s, oldest);
    lock.lock();
    if (!waited.ok()) return waited;
  }
}

absl::Status VulkanDevice::launch(const sdk::Launch& l) {
  auto* kernel = static_cast<VulkanKernel*>(l.kernel);
  // A dependent launch runs as a plain one: Vulkan has no programmatic
  // dependent launch, and waiting for the previous dispatch is always correct.
  if (l.cluster != std::array<uint32_t, 3>{0, 0, 0})
    return absl::UnimplementedError(absl::StrFormat(
        "launch(%s): the vulkan backend has no thread-block clusters (cluster %d x %d x %d "
        "requested; supports_clusters is 0)",
        kernel->qualified, l.cluster[0], l.cluster[1], l.cluster[2]));
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto s = stream_of(l.stream); !s.ok()) return s.status();
    if (graphs_.capturing(l.stream)) return graphs_.capture_launch(l.stream, l);
  }
  auto pipeline = kernel->pipeline(l.block, l.shared_memory_bytes);
  if (!pipeline.ok()) return pipeline.status();
  const bool through_buffer = kernel->argument_buffer_bytes > 0;
  const uint32_t capacity =
      through_buffer ? kernel->argument_buffer_bytes : kernel->push_constant_bytes;
  if (l.params.size() > capacity)
    return absl::InvalidArgumentError(absl::StrFormat(
        "vulkan: launch of %s: %d bytes of parameters for a %d-byte %s", kernel->qualified,
        l.params.size(), capacity, through_buffer ? "argument buffer" : "push-constant range"));
  // Push constants are whole words: the parameters, or their copy's address.
  std::array<std::byte, 256> constants{};
  std::unique_lock<std::mutex> lock(mu_);
  auto s = stream_of(l.stream);
  if (!s.ok()) return s.status();
  if (through_buffer) {
    auto address = copy_arguments(lock, *s, l.params);
    if (!address.ok()) return address.status();
    // The stream may have been destroyed while the ring was full.
    if (auto again = stream_of(l.stream); !again.ok() || *again != *s)
      return absl::FailedPreconditionError(absl::StrFormat(
          "vulkan: launch of %s: stream %d was destroyed during the launch", kernel->qualified,
          l.stream));
    std::memcpy(constants.data(), &*address, sizeof(uint64_t));
  } else if (kernel->push_constant_bytes <= constants.size()) {
    std::memcpy(constants.data(), l.params.data(), l.params.size());
  } else {
    return absl::InternalError(absl::StrFormat("vulkan: %s: a %d-byte push-constant range",
                                               kernel->qualified, kernel->push_constant_bytes));
  }
  auto cmd = record(**s);
  if (!cmd.ok()) return cmd.status();
  vk_.vkCmdBindPipeline(*cmd, VK_PIPELINE_BIND_POINT_COMPUTE, *pipeline);
  if (kernel->push_constant_bytes > 0)
    vk_.vkCmdPushConstants(*cmd, kernel->layout, VK_SHADER_STAGE_COMPUTE_BIT, 0,
                           kernel->push_constant_bytes, constants.data());
  vk_.vkCmdDispatch(*cmd, l.grid[0], l.grid[1], l.grid[2]);
  return command_recorded(**s);
}

}  // namespace sparkrt::vulkan
