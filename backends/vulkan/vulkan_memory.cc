// Device memory of the Vulkan backend: a buffer with a device address per
// allocation (sparse over several allocations past the driver's limit), and
// mapped host-visible buffers for pinned host memory.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <vector>

#include "absl/strings/str_format.h"
#include "vulkan_device.h"
#include "vulkan_stream.h"

namespace sparkrt::vulkan {
namespace {

// Returned addresses are aligned to this, as on CUDA.
constexpr uint64_t kAddressAlign = 256;

}  // namespace

absl::StatusOr<uint32_t> VulkanDevice::memory_type(uint32_t type_bits, bool host) const {
  // Device memory: device-local, preferably not host-visible (BAR windows are
  // small). Host memory: host-visible and coherent, preferably cached and not
  // device-local.
  int best = -1, best_score = -1;
  for (uint32_t i = 0; i < memory_props_.memoryTypeCount; ++i) {
    if (!(type_bits & (1u << i))) continue;
    const VkMemoryPropertyFlags f = memory_props_.memoryTypes[i].propertyFlags;
    const bool local = f & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT;
    const bool visible = f & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT;
    const bool coherent = f & VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
    const bool cached = f & VK_MEMORY_PROPERTY_HOST_CACHED_BIT;
    int score;
    if (host) {
      if (!visible || !coherent) continue;
      score = (cached ? 2 : 0) + (local ? 0 : 1);
    } else {
      if (!local) continue;
      score = visible ? 0 : 1;
    }
    if (score > best_score) best = static_cast<int>(i), best_score = score;
  }
  if (best < 0)
    return absl::ResourceExhaustedError(absl::StrFormat(
        "vulkan: no %s memory type for this buffer", host ? "host-visible coherent" : "device-local"));
  return static_cast<uint32_t>(best);
}

absl::Status VulkanDevice::make_buffer(uint64_t bytes, VkBufferUsageFlags usage, bool host,
                                       VkBuffer& buffer, VkDeviceMemory& memory,
                                       bool device_address, VkMemoryPropertyFlags* flags) {
  auto info = vk_struct<VkBufferCreateInfo>(VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO);
  info.size = bytes;
  info.usage = usage;
  info.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
  if (VkResult r = vk_.vkCreateBuffer(device_, &info, nullptr, &buffer); r != VK_SUCCESS)
    return vk_error(r, absl::StrFormat("vkCreateBuffer(%d bytes)", bytes));
  VkMemoryRequirements req;
  vk_.vkGetBufferMemoryRequirements(device_, buffer, &req);
  auto type = memory_type(req.memoryTypeBits, host);
  if (!type.ok()) {
    vk_.vkDestroyBuffer(device_, buffer, nullptr);
    return type.status();
  }
  auto address_flag =
      vk_struct<VkMemoryAllocateFlagsInfo>(VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_FLAGS_INFO);
  address_flag.flags = VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT;
  auto alloc = vk_struct<VkMemoryAllocateInfo>(VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, device_address ? &address_flag : nullptr);
  alloc.allocationSize = req.size;
  alloc.memoryTypeIndex = *type;
  if (flags != nullptr) *flags = memory_props_.memoryTypes[*type].propertyFlags;
  if (VkResult r = vk_.vkAllocateMemory(device_, &alloc, nullptr, &memory); r != VK_SUCCESS) {
    vk_.vkDestroyBuffer(device_, buffer, nullptr);
    return vk_error(r, absl::StrFormat("vkAllocateMemory(%d bytes)", req.size));
  }
  if (VkResult r = vk_.vkBindBufferMemory(device_, buffer, memory, 0); r != VK_SUCCESS) {
    vk_.vkDestroyBuffer(device_, buffer, nullptr);
    vk_.vkFreeMemory(device_, memory, nullptr);
    return vk_error(r, "vkBindBufferMemory");
  }
  return absl::OkStatus();
}

void VulkanDevice::release(const Allocation& a) {
  vk_.vkDestroyBuffer(device_, a.buffer, nullptr);
  if (a.memory != VK_NULL_HANDLE) vk_.vkFreeMemory(device_, a.memory, nullptr);
  for (VkDeviceMemory m : a.chunks) vk_.vkFreeMemory(device_, m, nullptr);
}

absl::Status VulkanDevice::make_sparse_buffer(uint64_t size, VkBufferUsageFlags usage,
                                              Allocation& a) {
  auto info = vk_struct<VkBufferCreateInfo>(VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO);
  info.flags = VK_BUFFER_CREATE_SPARSE_BINDING_BIT;
  info.size = size;
  info.usage = usage;
  info.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
  if (VkResult r = vk_.vkCreateBuffer(device_, &info, nullptr, &a.buffer); r != VK_SUCCESS)
    return vk_error(r, absl::StrFormat("vkCreateBuffer(%d bytes, sparse)", size));
  VkMemoryRequirements req;
  vk_.vkGetBufferMemoryRequirements(device_, a.buffer, &req);
  const auto fail = [&](absl::Status st) {
    release(a);
    a = Allocation{};
    return st;
  };
  auto type = memory_type(req.memoryTypeBits, false);
  if (!type.ok()) return fail(type.status());
  const uint64_t chunk = max_allocation_ / req.alignment * req.alignment;
  if (chunk == 0)
    return fail(absl::ResourceExhaustedError(absl::StrFormat(
        "vulkan: a sparse page (%d bytes) is larger than one allocation may be (%d bytes)",
        req.alignment, max_allocation_)));
  std::vector<VkSparseMemoryBind> binds;
  for (uint64_t at = 0; at < req.size; at += chunk) {
    auto flag = vk_struct<VkMemoryAllocateFlagsInfo>(VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_FLAGS_INFO);
    flag.flags = VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT;
    auto alloc = vk_struct<VkMemoryAllocateInfo>(VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, &flag);
    alloc.allocationSize = std::min(chunk, req.size - at);
    alloc.memoryTypeIndex = *type;
    VkDeviceMemory memory = VK_NULL_HANDLE;
    if (VkResult r = vk_.vkAllocateMemory(device_, &alloc, nullptr, &memory); r != VK_SUCCESS)
      return fail(vk_error(r, absl::StrFormat("vkAllocateMemory(%d bytes, part %d of a %d-byte "
                                              "sparse buffer)",
                                              alloc.allocationSize, binds.size(), size)));
    a.chunks.push_back(memory);
    binds.push_back({at, alloc.allocationSize, memory, 0, 0});
  }
  VkSparseBufferMemoryBindInfo buffer_binds{a.buffer, static_cast<uint32_t>(binds.size()),
                                            binds.data()};
  auto bind = vk_struct<VkBindSparseInfo>(VK_STRUCTURE_TYPE_BIND_SPARSE_INFO);
  bind.bufferBindCount = 1;
  bind.pBufferBinds = &buffer_binds;
  auto fence_info = vk_struct<VkFenceCreateInfo>(VK_STRUCTURE_TYPE_FENCE_CREATE_INFO);
  VkFence fence = VK_NULL_HANDLE;
  if (VkResult r = vk_.vkCreateFence(device_, &fence_info, nullptr, &fence); r != VK_SUCCESS)
    return fail(vk_error(r, "vkCreateFence (sparse binding)"));
  VkResult r;
  {
    std::lock_guard<std::mutex> lock(mu_);  // the queue is used under mu_
    r = vk_.vkQueueBindSparse(queue_, 1, &bind, fence);
  }
  if (r == VK_SUCCESS) r = vk_.vkWaitForFences(device_, 1, &fence, VK_TRUE, UINT64_MAX);
  vk_.vkDestroyFence(device_, fence, nullptr);
  if (r != VK_SUCCESS) return fail(vk_error(r, "vkQueueBindSparse"));
  return absl::OkStatus();
}

absl::Status VulkanDevice::make_mapped_buffer(uint64_t bytes, VkBufferUsageFlags usage,
                                              bool device_address, const char* what,
                                              VkBuffer& buffer, VkDeviceMemory& memory,
                                              std::byte*& mapped) {
  buffer = VK_NULL_HANDLE;
  memory = VK_NULL_HANDLE;
  if (auto st = make_buffer(bytes, usage, true, buffer, memory, device_address); !st.ok()) {
    buffer = VK_NULL_HANDLE;
    memory = VK_NULL_HANDLE;
    return st;
  }
  void* p = nullptr;
  if (VkResult r = vk_.vkMapMemory(device_, memory, 0, VK_WHOLE_SIZE, 0, &p); r != VK_SUCCESS) {
    vk_.vkDestroyBuffer(device_, buffer, nullptr);
    vk_.vkFreeMemory(device_, memory, nullptr);
    buffer = VK_NULL_HANDLE;
    memory = VK_NULL_HANDLE;
    return vk_error(r, absl::StrFormat("vkMapMemory (%s)", what));
  }
  mapped = static_cast<std::byte*>(p);
  return absl::OkStatus();
}

absl::StatusOr<SparkrtDevicePtr> VulkanDevice::alloc(uint64_t bytes) {
  // Room to align the address, and whole words for the fills.
  const uint64_t largest = max_allocation_ - kAddressAlign - 4;
  if (bytes > largest && (!sparse_ || bytes > device_heap_bytes_ - kAddressAlign - 4))
    return absl::ResourceExhaustedError(
        sparse_ ? absl::StrFormat("more than this device's memory (%d bytes)", device_heap_bytes_)
                : absl::StrFormat("more than one allocation may be on this device (%d bytes), "
                                  "which has no sparse binding to join several; allocate less, "
                                  "or in parts",
                                  largest));
  const uint64_t size = (bytes + 3) / 4 * 4 + kAddressAlign;
  const VkBufferUsageFlags usage =
      VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
      VK_BUFFER_USAGE_TRANSFER_DST_BIT | VK_BUFFER_USAGE_SHADER_DEVICE_ADDRESS_BIT;
  Allocation a;
  VkMemoryPropertyFlags flags = 0;
  if (bytes > largest) {
    if (auto st = make_sparse_buffer(size, usage, a); !st.ok()) return st;
  } else if (auto st = make_buffer(size, usage, false, a.buffer, a.memory, true, &flags);
             !st.ok()) {
    return st;
  }
  auto where = vk_struct<VkBufferDeviceAddressInfo>(VK_STRUCTURE_TYPE_BUFFER_DEVICE_ADDRESS_INFO);
  where.buffer = a.buffer;
  const uint64_t base = vk_.vkGetBufferDeviceAddress(device_, &where);
  a.offset = (kAddressAlign - base % kAddressAlign) % kAddressAlign;
  a.bytes = bytes;
  // Device memory that is also host-visible and coherent (lavapipe, UMA
  // devices) is mapped, so host copies skip the staging buffer.
  if ((flags & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT) &&
      (flags & VK_MEMORY_PROPERTY_HOST_COHERENT_BIT)) {
    void* p = nullptr;
    if (vk_.vkMapMemory(device_, a.memory, 0, VK_WHOLE_SIZE, 0, &p) == VK_SUCCESS)
      a.mapped = static_cast<std::byte*>(p) + a.offset;
  }
  std::lock_guard<std::mutex> lock(mu_);
  allocations_.emplace(base + a.offset, a);
  return base + a.offset;
}

absl::StatusOr<VulkanDevice::Range> VulkanDevice::resolve(SparkrtDevicePtr ptr, uint64_t bytes,
                                                          const char* what) const {
  auto it = allocations_.upper_bound(ptr);
  if (it != allocations_.begin()) {
    --it;
    const uint64_t offset = ptr - it->first;
    if (offset < it->second.bytes || (offset == it->second.bytes && bytes == 0)) {
      if (bytes > it->second.bytes - offset)
        return absl::OutOfRangeError(absl::StrFormat(
            "vulkan: %s: %d bytes at 0x%x run past the end of the allocation at 0x%x (%d bytes)",
            what, bytes, ptr, it->first, it->second.bytes));
      return Range{&it->second, it->second.offset + offset};
    }
  }
  return absl::InvalidArgumentError(absl::StrFormat(
      "vulkan: %s: address 0x%x is in no allocation of this device (never allocated, or freed)",
      what, ptr));
}

absl::Status VulkanDevice::free(SparkrtDevicePtr ptr) {
  std::unique_lock<std::mutex> lock(mu_);
  auto it = allocations_.find(ptr);
  if (it == allocations_.end())
    return absl::InvalidArgumentError(absl::StrFormat(
        "vulkan: free(0x%x): not an address alloc returned, or already freed", ptr));
  const Allocation a = it->second;
  allocations_.erase(it);
  // Work already queued may still use it: wait for every stream, as
  // cuMemFree does.
  absl::Status status = wait_all(lock);
  release(a);
  return status;
}

absl::Status VulkanDevice::wait_all(std::unique_lock<std::mutex>& lock) {
  std::vector<std::pair<std::shared_ptr<Stream>, uint64_t>> pending;
  absl::Status status;
  for (auto& [handle, s] : streams_) {
    status.Update(submit(*s));
    pending.emplace_back(s, s->submitted);
  }
  lock.unlock();
  for (auto& [s, value] : pending) status.Update(wait(s, value));
  return status;
}

absl::StatusOr<void*> VulkanDevice::host_alloc(uint64_t bytes) {
  if (bytes > max_allocation_) return sdk::Device::host_alloc(bytes);  // pageable, and says so
  PinnedBuffer p;
  p.bytes = bytes;
  if (auto st = make_buffer(bytes, VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT,
                            true, p.buffer, p.memory, false);
      !st.ok())
    return st;
  void* host = nullptr;
  if (VkResult r = vk_.vkMapMemory(device_, p.memory, 0, VK_WHOLE_SIZE, 0, &host); r != VK_SUCCESS) {
    vk_.vkDestroyBuffer(device_, p.buffer, nullptr);
    vk_.vkFreeMemory(device_, p.memory, nullptr);
    return vk_error(r, "vkMapMemory (host_alloc)");
  }
  std::lock_guard<std::mutex> lock(mu_);
  pinned_.emplace(reinterpret_cast<uintptr_t>(host), p);
  return host;
}

absl::Status VulkanDevice::host_free(void* ptr) {
  std::unique_lock<std::mutex> lock(mu_);
  auto it = pinned_.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == pinned_.end()) {
    lock.unlock();
    return sdk::Device::host_free(ptr);
  }
  const PinnedBuffer p = it->second;
  pinned_.erase(it);
  absl::Status status = wait_all(lock);
  vk_.vkDestroyBuffer(device_, p.buffer, nullptr);
  vk_.vkFreeMemory(device_, p.memory, nullptr);
  return status;
}

const VulkanDevice::PinnedBuffer* VulkanDevice::pinned_containing(const void* host, uint64_t bytes,
                                                                  uint64_t& offset) const {
  const auto h = reinterpret_cast<uintptr_t>(host);
  auto it = pinned_.upper_bound(h);
  if (it == pinned_.begin()) return nullptr;
  --it;
  offset = h - it->first;
  if (offset >= it->second.bytes || bytes > it->second.bytes - offset) return nullptr;
  return &it->second;
}

}  // namespace sparkrt::vulkan
