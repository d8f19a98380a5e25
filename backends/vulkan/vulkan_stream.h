// A stream of the Vulkan backend (vulkan_streams.cc): a timeline semaphore
// and the batches of recorded work that signal it.
#ifndef SPARKRT_BACKENDS_VULKAN_VULKAN_STREAM_H_
#define SPARKRT_BACKENDS_VULKAN_VULKAN_STREAM_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <utility>
#include <vector>

#include "vulkan_device.h"

namespace sparkrt::vulkan {

// A stream: its work is recorded into the open command buffer, which is
// submitted as one batch that signals the next value of the stream's
// timeline semaphore; each batch waits for the one before it.
struct VulkanDevice::Stream {
  struct InFlight {
    uint64_t value;
    VkCommandBuffer cmd;
    std::vector<std::shared_ptr<Stream>> holds;  // streams whose semaphores it waits on
  };
  // Parameters passed through an argument buffer, copied at each launch
  // into host-visible memory the GPU reads: a ring, made at the stream's
  // first such launch, whose bytes come free as the batches using them
  // complete (`marks`, in submission order).
  struct ArgumentRing {
    VkBuffer buffer = VK_NULL_HANDLE;
    VkDeviceMemory memory = VK_NULL_HANDLE;
    std::byte* mapped = nullptr;
    uint64_t address = 0;
    uint64_t head = 0;  // where the next copy goes
    uint64_t used = 0;  // bytes not yet free, the skipped tail of a wrap included
    struct Mark {
      uint64_t value;  // the batch's timeline value
      uint64_t bytes;
    };
    std::deque<Mark> marks;
  };
  Stream(const DeviceFunctions& functions, VkDevice dev) : vk(functions), device(dev) {}
  ~Stream() {
    if (timeline != VK_NULL_HANDLE) vk.vkDestroySemaphore(device, timeline, nullptr);
    if (arguments.buffer != VK_NULL_HANDLE) vk.vkDestroyBuffer(device, arguments.buffer, nullptr);
    if (arguments.memory != VK_NULL_HANDLE) vk.vkFreeMemory(device, arguments.memory, nullptr);
  }
  const DeviceFunctions& vk;
  VkDevice device;
  VkSemaphore timeline = VK_NULL_HANDLE;
  uint64_t submitted = 0;  // the value the last submitted batch signals
  VkCommandBuffer open = VK_NULL_HANDLE;  // signals submitted + 1 when submitted
  uint32_t commands = 0;
  std::vector<std::pair<VkSemaphore, uint64_t>> waits;  // of the next batch
  std::vector<std::shared_ptr<Stream>> wait_holds;
  std::deque<InFlight> in_flight;
  ArgumentRing arguments;
};

}  // namespace sparkrt::vulkan

#endif  // SPARKRT_BACKENDS_VULKAN_VULKAN_STREAM_H_
