#include "vulkan_device.h"

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <thread>
#include <utility>

#include "absl/strings/str_format.h"
// After <cstdint>: they declare uint32_t arrays.
#include "copy_bytes_spv.h"
#include "fill_bytes_spv.h"

namespace sparkrt::vulkan {
namespace {

namespace spirv = sdk::spirv;

// Returned addresses are aligned to this, as on CUDA.
constexpr uint64_t kAddressAlign = 256;
// Commands a batch takes before it is submitted anyway.
constexpr uint32_t kMaxBatchCommands = 64;
constexpr uint32_t kQueriesPerPool = 64;
constexpr uint64_t kStagingBytes = uint64_t{32} << 20;
constexpr uint32_t kFillBlock = 64;
constexpr uint32_t kCopyBlock = 256;
// Bytes one copy_bytes dispatch moves at most: its 16-byte index stays far
// from 32-bit overflow.
constexpr uint64_t kCopyChunkBytes = uint64_t{1} << 34;
constexpr uint64_t kWaitSliceNs = 1'000'000'000;
// A stream's argument ring (parameters too large for push constants): its
// size, and the alignment of each launch's copy (a cache line).
constexpr uint64_t kArgumentRingBytes = uint64_t{256} << 10;
constexpr uint64_t kArgumentAlign = 64;

constexpr VkAccessFlags kWrites = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
constexpr VkAccessFlags kReadsWrites = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT |
                                       VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
constexpr VkPipelineStageFlags kWork =
    VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT;

bool has_extension(const std::vector<VkExtensionProperties>& list, const char* name) {
  return std::any_of(list.begin(), list.end(),
                     [&](const VkExtensionProperties& e) { return std::strcmp(e.extensionName, name) == 0; });
}

// The parameters of the built-in fill_bytes kernel (fill_bytes.comp).
constexpr SparkrtParamInfo kFillParams[] = {{0, 8, 8}, {8, 4, 4}, {12, 4, 4}};
struct FillArgs {
  uint64_t address;
  uint32_t value;
  uint32_t count;
};

// The parameters of the built-in copy_bytes kernel (copy_bytes.comp).
constexpr SparkrtParamInfo kCopyParams[] = {{0, 8, 8}, {8, 8, 8}, {16, 4, 4}, {20, 4, 4}};
struct CopyArgs {
  uint64_t dst;
  uint64_t src;
  uint32_t vectors;  // 16-byte units
  uint32_t tail;     // bytes after them, fewer than 16
};

}  // namespace

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

VulkanDevice::VulkanDevice(const Instance& instance, VkPhysicalDevice physical)
    : instance_(instance), physical_(physical) {}

absl::StatusOr<std::unique_ptr<VulkanDevice>> VulkanDevice::open(const Instance& instance,
                                                                 int index) {
  uint32_t n = 0;
  if (VkResult r = instance.vkEnumeratePhysicalDevices(instance.instance, &n, nullptr);
      r != VK_SUCCESS)
    return vk_error(r, "vkEnumeratePhysicalDevices");
  std::vector<VkPhysicalDevice> devices(n);
  if (VkResult r = instance.vkEnumeratePhysicalDevices(instance.instance, &n, devices.data());
      r != VK_SUCCESS && r != VK_INCOMPLETE)
    return vk_error(r, "vkEnumeratePhysicalDevices");
  if (index < 0 || static_cast<uint32_t>(index) >= n)
    return absl::OutOfRangeError(absl::StrFormat(
        "vulkan: device index %d requested, %d physical device(s) present", index, n));
  std::unique_ptr<VulkanDevice> device(new VulkanDevice(instance, devices[index]));
  if (auto st = device->init(index); !st.ok()) return st;
  return device;
}

absl::Status VulkanDevice::init(int index) {
  const Instance& in = instance_;
  auto subgroup = vk_struct<VkPhysicalDeviceSubgroupProperties>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES);
  auto maintenance3 = vk_struct<VkPhysicalDeviceMaintenance3Properties>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES);
  auto sm = vk_struct<VkPhysicalDeviceShaderSMBuiltinsPropertiesNV>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_SM_BUILTINS_PROPERTIES_NV);
  uint32_t n = 0;
  in.vkEnumerateDeviceExtensionProperties(physical_, nullptr, &n, nullptr);
  std::vector<VkExtensionProperties> extensions(n);
  in.vkEnumerateDeviceExtensionProperties(physical_, nullptr, &n, extensions.data());
  const bool nv_sm = has_extension(extensions, VK_NV_SHADER_SM_BUILTINS_EXTENSION_NAME);
  subgroup.pNext = &maintenance3;
  if (nv_sm) maintenance3.pNext = &sm;
  auto props2 = vk_struct<VkPhysicalDeviceProperties2>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, &subgroup);
  in.vkGetPhysicalDeviceProperties2(physical_, &props2);
  props_ = props2.properties;
  const std::string name = props_.deviceName;
  if (VK_API_VERSION_MAJOR(props_.apiVersion) == 1 && VK_API_VERSION_MINOR(props_.apiVersion) < 2)
    return absl::FailedPreconditionError(absl::StrFormat(
        "vulkan: device %d (%s) offers Vulkan %d.%d; sparkrt needs 1.2 or later", index, name,
        VK_API_VERSION_MAJOR(props_.apiVersion), VK_API_VERSION_MINOR(props_.apiVersion)));
  subgroup_size_ = std::max<uint32_t>(subgroup.subgroupSize, 1);
  multiprocessors_ = nv_sm ? sm.shaderSMCount
                     : props_.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU
                         ? std::max(1u, std::thread::hardware_concurrency())
                         : 16;  // an estimate: Vulkan has no portable count (README.md)
  in.vkGetPhysicalDeviceMemoryProperties(physical_, &memory_props_);
  uint64_t heap_bytes = 0;
  for (uint32_t i = 0; i < memory_props_.memoryHeapCount; ++i)
    if (memory_props_.memoryHeaps[i].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT)
      heap_bytes = std::max(heap_bytes, memory_props_.memoryHeaps[i].size);
  max_allocation_ = std::min<uint64_t>(maintenance3.maxMemoryAllocationSize, heap_bytes);
  device_heap_bytes_ = heap_bytes;
  if (const char* cap = std::getenv("SPARKRT_VULKAN_MAX_ALLOCATION"); cap != nullptr && *cap) {
    // Lowers the limit, so that the sparse path runs on any device.
    char* end = nullptr;
    errno = 0;
    const unsigned long long v = std::strtoull(cap, &end, 10);
    if (errno != 0 || *end != '\0' || cap[0] < '0' || cap[0] > '9' || v < (1u << 20))
      return absl::InvalidArgumentError(absl::StrFormat(
          "vulkan: SPARKRT_VULKAN_MAX_ALLOCATION='%s' is not a byte count of at least 1 MiB "
          "(1048576); unset it or give one",
          cap));
    max_allocation_ = std::min<uint64_t>(max_allocation_, v);
  }

  // Features: what every kernel relies on is required, the rest enabled
  // where offered.
  auto f12 = vk_struct<VkPhysicalDeviceVulkan12Features>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES);
  auto f11 = vk_struct<VkPhysicalDeviceVulkan11Features>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES, &f12);
  auto features = vk_struct<VkPhysicalDeviceFeatures2>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, &f11);
  in.vkGetPhysicalDeviceFeatures2(physical_, &features);
  std::vector<std::string> missing;
  const auto require = [&](VkBool32 have, const char* what) {
    if (!have) missing.push_back(what);
  };
  require(f12.bufferDeviceAddress, "bufferDeviceAddress");
  require(f12.timelineSemaphore, "timelineSemaphore");
  require(f12.scalarBlockLayout, "scalarBlockLayout");
  require(f12.storageBuffer8BitAccess, "storageBuffer8BitAccess");
  require(f11.storageBuffer16BitAccess, "storageBuffer16BitAccess");
  require(features.features.shaderInt64, "shaderInt64");
  if (!missing.empty()) {
    std::string list;
    for (const auto& m : missing) list += (list.empty() ? "" : ", ") + m;
    return absl::FailedPreconditionError(absl::StrFormat(
        "vulkan: device %d (%s) lacks features sparkrt's kernels need: %s", index, name, list));
  }
  auto e12 = vk_struct<VkPhysicalDeviceVulkan12Features>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES);
  auto e11 = vk_struct<VkPhysicalDeviceVulkan11Features>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES, &e12);
  auto enable = vk_struct<VkPhysicalDeviceFeatures2>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, &e11);
  e12.bufferDeviceAddress = VK_TRUE;
  e12.timelineSemaphore = VK_TRUE;
  e12.scalarBlockLayout = VK_TRUE;
  e12.storageBuffer8BitAccess = VK_TRUE;
  e12.uniformAndStorageBuffer8BitAccess = f12.uniformAndStorageBuffer8BitAccess;
  e12.shaderInt8 = f12.shaderInt8;
  e12.shaderFloat16 = f12.shaderFloat16;
  e12.vulkanMemoryModel = f12.vulkanMemoryModel;
  e12.vulkanMemoryModelDeviceScope = f12.vulkanMemoryModelDeviceScope;
  e11.storageBuffer16BitAccess = VK_TRUE;
  enable.features.shaderInt64 = VK_TRUE;
  enable.features.shaderInt16 = features.features.shaderInt16;
  enable.features.sparseBinding = features.features.sparseBinding;

  in.vkGetPhysicalDeviceQueueFamilyProperties(physical_, &n, nullptr);
  std::vector<VkQueueFamilyProperties> families(n);
  in.vkGetPhysicalDeviceQueueFamilyProperties(physical_, &n, families.data());
  // A compute family, preferably one without graphics (NVIDIA's
  // compute-only family).
  int chosen = -1;
  for (uint32_t i = 0; i < n; ++i) {
    const VkQueueFlags flags = families[i].queueFlags;
    if (!(flags & VK_QUEUE_COMPUTE_BIT)) continue;
    if (chosen < 0 || ((families[chosen].queueFlags & VK_QUEUE_GRAPHICS_BIT) &&
                       !(flags & VK_QUEUE_GRAPHICS_BIT)))
      chosen = static_cast<int>(i);
  }
  const bool found = chosen >= 0;
  if (found) {
    queue_family_ = static_cast<uint32_t>(chosen);
    timestamp_bits_ = families[chosen].timestampValidBits;
  }
  if (!found)
    return absl::FailedPreconditionError(
        absl::StrFormat("vulkan: device %d (%s) has no compute queue", index, name));
  sparse_ = features.features.sparseBinding &&
            (families[queue_family_].queueFlags & VK_QUEUE_SPARSE_BINDING_BIT);
  const float priority = 1.0f;
  auto queue = vk_struct<VkDeviceQueueCreateInfo>(VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO);
  queue.queueFamilyIndex = queue_family_;
  queue.queueCount = 1;
  queue.pQueuePriorities = &priority;
  auto info = vk_struct<VkDeviceCreateInfo>(VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, &enable);
  info.queueCreateInfoCount = 1;
  info.pQueueCreateInfos = &queue;
  if (VkResult r = in.vkCreateDevice(physical_, &info, nullptr, &device_); r != VK_SUCCESS) {
    device_ = VK_NULL_HANDLE;
    return vk_error(r, absl::StrFormat("vkCreateDevice(%s)", name));
  }
  auto functions = load_device_functions(in, device_);
  if (!functions.ok()) return functions.status();
  vk_ = *functions;
  vk_.vkGetDeviceQueue(device_, queue_family_, 0, &queue_);
  auto pool = vk_struct<VkCommandPoolCreateInfo>(VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO);
  pool.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
  pool.queueFamilyIndex = queue_family_;
  if (VkResult r = vk_.vkCreateCommandPool(device_, &pool, nullptr, &pool_); r != VK_SUCCESS)
    return vk_error(r, "vkCreateCommandPool");
  auto first = create_stream();  // handle 1, renamed 0: the default stream
  if (!first.ok()) return first.status();
  std::shared_ptr<Stream> default_stream = std::move(streams_.at(*first));
  streams_.erase(*first);
  streams_.emplace(0, std::move(default_stream));

  // The built-in kernels: bytes a fill of whole words cannot set, and
  // device-to-device copies.
  auto builtin = [&](std::span<const uint32_t> words, const char* entry,
                     std::span<const SparkrtParamInfo> params,
                     std::unique_ptr<VulkanModule>& module) -> absl::StatusOr<VulkanKernel*> {
    auto loaded = load_module("sparkrt_vulkan_builtin", SPARKRT_IMAGE_SPIRV, std::as_bytes(words));
    if (!loaded.ok()) return loaded.status();
    module.reset(static_cast<VulkanModule*>(loaded->release()));
    auto kernel = module->get_kernel(entry, params);
    if (!kernel.ok()) return kernel.status();
    return static_cast<VulkanKernel*>(*kernel);
  };
  auto fill = builtin(sparkrt_fill_bytes_spv, "fill_bytes", kFillParams, builtin_fill_);
  if (!fill.ok()) return fill.status();
  fill_bytes_ = *fill;
  auto copy = builtin(sparkrt_copy_bytes_spv, "copy_bytes", kCopyParams, builtin_copy_);
  if (!copy.ok()) return copy.status();
  copy_bytes_ = *copy;
  return absl::OkStatus();
}

VulkanDevice::~VulkanDevice() {
  if (device_ == VK_NULL_HANDLE) return;
  vk_.vkDeviceWaitIdle(device_);
  builtin_fill_.reset();
  builtin_copy_.reset();
  std::vector<VkCommandBuffer> cmds = std::move(free_cmds_);
  for (auto& [handle, s] : streams_) {
    if (s->open != VK_NULL_HANDLE) cmds.push_back(s->open);
    for (auto& f : s->in_flight) cmds.push_back(f.cmd);
    s->in_flight.clear();
    s->wait_holds.clear();
  }
  if (!cmds.empty())
    vk_.vkFreeCommandBuffers(device_, pool_, static_cast<uint32_t>(cmds.size()), cmds.data());
  events_.clear();
  streams_.clear();
  for (auto& [address, a] : allocations_) release(a);
  for (auto& [host, p] : pinned_) {
    vk_.vkDestroyBuffer(device_, p.buffer, nullptr);
    vk_.vkFreeMemory(device_, p.memory, nullptr);
  }
  if (staging_.buffer != VK_NULL_HANDLE) {
    vk_.vkDestroyBuffer(device_, staging_.buffer, nullptr);
    vk_.vkFreeMemory(device_, staging_.memory, nullptr);
  }
  for (VkQueryPool q : query_pools_) vk_.vkDestroyQueryPool(device_, q, nullptr);
  if (pool_ != VK_NULL_HANDLE) vk_.vkDestroyCommandPool(device_, pool_, nullptr);
  vk_.vkDestroyDevice(device_, nullptr);
}

absl::Status VulkanDevice::properties(SparkrtDeviceProperties& out) {
  std::snprintf(out.name, sizeof(out.name), "%s", props_.deviceName);
  out.architecture[0] = '\0';
  uint64_t total = 0;
  for (uint32_t i = 0; i < memory_props_.memoryHeapCount; ++i)
    if (memory_props_.memoryHeaps[i].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT)
      total += memory_props_.memoryHeaps[i].size;
  out.total_memory = total;
  out.multiprocessor_count = multiprocessors_;
  out.warp_size = subgroup_size_;
  const VkPhysicalDeviceLimits& l = props_.limits;
  out.max_threads_per_block = l.maxComputeWorkGroupInvocations;
  for (int i = 0; i < 3; ++i) {
    out.max_block_dim[i] = l.maxComputeWorkGroupSize[i];
    out.max_grid_dim[i] = l.maxComputeWorkGroupCount[i];
  }
  out.max_shared_memory_per_block = l.maxComputeSharedMemorySize;
  out.max_shared_memory_per_block_optin = l.maxComputeSharedMemorySize;
  out.compute_capability_major = 0;
  out.compute_capability_minor = 0;
  out.image_formats = 1u << SPARKRT_IMAGE_SPIRV;
  out.flags = props_.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU ? SPARKRT_DEVICE_FLAG_EMULATED : 0;
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<sdk::Module>> VulkanDevice::load_module(
    std::string_view name, SparkrtImageFormat format, std::span<const std::byte> image) {
  if (format != SPARKRT_IMAGE_SPIRV)
    return absl::InvalidArgumentError(absl::StrFormat(
        "vulkan: module %s: image format %d is not SPIR-V, the only one this backend takes",
        name, static_cast<int>(format)));
  const std::string_view bytes(reinterpret_cast<const char*>(image.data()), image.size());
  auto reflection = spirv::reflect(bytes);
  if (!reflection.ok())
    return absl::InvalidArgumentError(absl::StrFormat("vulkan: module %s: %s", name,
                                                      reflection.status().message()));
  std::vector<uint32_t> words(image.size() / 4);
  std::memcpy(words.data(), image.data(), words.size() * 4);
  auto info = vk_struct<VkShaderModuleCreateInfo>(VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO);
  info.codeSize = words.size() * 4;
  info.pCode = words.data();
  VkShaderModule shader = VK_NULL_HANDLE;
  if (VkResult r = vk_.vkCreateShaderModule(device_, &info, nullptr, &shader); r != VK_SUCCESS)
    return vk_error(r, absl::StrFormat("vkCreateShaderModule(%s)", name));
  return std::unique_ptr<sdk::Module>(
      new VulkanModule(*this, std::string(name), shader, *std::move(reflection)));
}

// ---- memory -------------------------------------------------------------------

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

// ---- streams -----------------------------------------------------------------

absl::StatusOr<std::shared_ptr<VulkanDevice::Stream>> VulkanDevice::stream_of(
    SparkrtStream stream) const {
  if (auto it = streams_.find(stream); it != streams_.end()) return it->second;
  return absl::InvalidArgumentError(absl::StrFormat(
      "vulkan: unknown stream %d (never created on this device, or destroyed)", stream));
}

absl::Status VulkanDevice::check_stream(SparkrtStream stream) {
  std::lock_guard<std::mutex> lock(mu_);
  return stream_of(stream).status();
}

absl::StatusOr<SparkrtStream> VulkanDevice::create_stream() {
  auto s = std::make_shared<Stream>(vk_, device_);
  auto type = vk_struct<VkSemaphoreTypeCreateInfo>(VK_STRUCTURE_TYPE_SEMAPHORE_TYPE_CREATE_INFO);
  type.semaphoreType = VK_SEMAPHORE_TYPE_TIMELINE;
  type.initialValue = 0;
  auto info = vk_struct<VkSemaphoreCreateInfo>(VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO, &type);
  if (VkResult r = vk_.vkCreateSemaphore(device_, &info, nullptr, &s->timeline); r != VK_SUCCESS) {
    s->timeline = VK_NULL_HANDLE;
    return vk_error(r, "vkCreateSemaphore (a stream's timeline)");
  }
  std::lock_guard<std::mutex> lock(mu_);
  const SparkrtStream handle = next_stream_++;
  streams_.emplace(handle, std::move(s));
  return handle;
}

absl::Status VulkanDevice::destroy_stream(SparkrtStream stream) {
  std::unique_lock<std::mutex> lock(mu_);
  if (stream == 0)
    return absl::InvalidArgumentError("vulkan: the default stream (0) cannot be destroyed");
  auto s = stream_of(stream);
  if (!s.ok()) return s.status();
  streams_.erase(stream);  // refused from now on; its work still completes
  return drain(lock, *s);
}

absl::Status VulkanDevice::synchronize(SparkrtStream stream) {
  std::unique_lock<std::mutex> lock(mu_);
  auto s = stream_of(stream);
  if (!s.ok()) return s.status();
  return drain(lock, *s);
}

absl::StatusOr<VkCommandBuffer> VulkanDevice::record(Stream& s) {
  if (s.open == VK_NULL_HANDLE) {
    VkCommandBuffer cmd = VK_NULL_HANDLE;
    if (!free_cmds_.empty()) {
      cmd = free_cmds_.back();
      free_cmds_.pop_back();
    } else {
      auto info = vk_struct<VkCommandBufferAllocateInfo>(VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO);
      info.commandPool = pool_;
      info.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
      info.commandBufferCount = 1;
      if (VkResult r = vk_.vkAllocateCommandBuffers(device_, &info, &cmd); r != VK_SUCCESS)
        return vk_error(r, "vkAllocateCommandBuffers");
    }
    auto begin = vk_struct<VkCommandBufferBeginInfo>(VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO);
    begin.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
    if (VkResult r = vk_.vkBeginCommandBuffer(cmd, &begin); r != VK_SUCCESS) {
      free_cmds_.push_back(cmd);
      return vk_error(r, "vkBeginCommandBuffer");
    }
    s.open = cmd;
    s.commands = 0;
  } else if (s.commands > 0) {
    auto barrier = vk_struct<VkMemoryBarrier>(VK_STRUCTURE_TYPE_MEMORY_BARRIER);
    barrier.srcAccessMask = kWrites;
    barrier.dstAccessMask = kReadsWrites;
    vk_.vkCmdPipelineBarrier(s.open, kWork, kWork, 0, 1, &barrier, 0, nullptr, 0, nullptr);
  }
  return s.open;
}

absl::Status VulkanDevice::submit(Stream& s) {
  if (s.open == VK_NULL_HANDLE) return absl::OkStatus();
  VkCommandBuffer cmd = s.open;
  s.open = VK_NULL_HANDLE;
  // What the batch wrote becomes visible to the host once it completes.
  auto barrier = vk_struct<VkMemoryBarrier>(VK_STRUCTURE_TYPE_MEMORY_BARRIER);
  barrier.srcAccessMask = kWrites;
  barrier.dstAccessMask = VK_ACCESS_HOST_READ_BIT | VK_ACCESS_HOST_WRITE_BIT;
  vk_.vkCmdPipelineBarrier(cmd, kWork, VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &barrier, 0, nullptr, 0,
                           nullptr);
  if (VkResult r = vk_.vkEndCommandBuffer(cmd); r != VK_SUCCESS) {
    free_cmds_.push_back(cmd);
    return vk_error(r, "vkEndCommandBuffer");
  }
  std::vector<VkSemaphore> wait_semaphores;
  std::vector<uint64_t> wait_values;
  std::vector<VkPipelineStageFlags> wait_stages;
  if (s.submitted > 0) {
    wait_semaphores.push_back(s.timeline);
    wait_values.push_back(s.submitted);
  }
  for (const auto& [sem, value] : s.waits) {
    wait_semaphores.push_back(sem);
    wait_values.push_back(value);
  }
  wait_stages.assign(wait_semaphores.size(), VK_PIPELINE_STAGE_ALL_COMMANDS_BIT);
  const uint64_t signal = s.submitted + 1;
  auto timeline = vk_struct<VkTimelineSemaphoreSubmitInfo>(VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO);
  timeline.waitSemaphoreValueCount = static_cast<uint32_t>(wait_values.size());
  timeline.pWaitSemaphoreValues = wait_values.data();
  timeline.signalSemaphoreValueCount = 1;
  timeline.pSignalSemaphoreValues = &signal;
  auto info = vk_struct<VkSubmitInfo>(VK_STRUCTURE_TYPE_SUBMIT_INFO, &timeline);
  info.waitSemaphoreCount = static_cast<uint32_t>(wait_semaphores.size());
  info.pWaitSemaphores = wait_semaphores.data();
  info.pWaitDstStageMask = wait_stages.data();
  info.commandBufferCount = 1;
  info.pCommandBuffers = &cmd;
  info.signalSemaphoreCount = 1;
  info.pSignalSemaphores = &s.timeline;
  if (VkResult r = vk_.vkQueueSubmit(queue_, 1, &info, VK_NULL_HANDLE); r != VK_SUCCESS) {
    free_cmds_.push_back(cmd);
    s.waits.clear();
    s.wait_holds.clear();
    return vk_error(r, "vkQueueSubmit");
  }
  s.submitted = signal;
  s.in_flight.push_back({signal, cmd, std::move(s.wait_holds)});
  s.waits.clear();
  s.wait_holds.clear();
  s.commands = 0;
  return absl::OkStatus();
}

void VulkanDevice::retire(Stream& s) {
  if (s.in_flight.empty()) return;
  uint64_t done = 0;
  if (vk_.vkGetSemaphoreCounterValue(device_, s.timeline, &done) != VK_SUCCESS) return;
  while (!s.in_flight.empty() && s.in_flight.front().value <= done) {
    free_cmds_.push_back(s.in_flight.front().cmd);
    s.in_flight.pop_front();
  }
}

absl::Status VulkanDevice::command_recorded(Stream& s) {
  ++s.commands;
  retire(s);
  if (s.commands >= kMaxBatchCommands || s.in_flight.empty()) return submit(s);
  return absl::OkStatus();
}

absl::Status VulkanDevice::wait(const std::shared_ptr<Stream>& s, uint64_t value) {
  auto info = vk_struct<VkSemaphoreWaitInfo>(VK_STRUCTURE_TYPE_SEMAPHORE_WAIT_INFO);
  info.semaphoreCount = 1;
  info.pSemaphores = &s->timeline;
  info.pValues = &value;
  for (;;) {
    const VkResult r = vk_.vkWaitSemaphores(device_, &info, kWaitSliceNs);
    if (r == VK_SUCCESS) return absl::OkStatus();
    if (r != VK_TIMEOUT) return vk_error(r, "vkWaitSemaphores (waiting for a stream)");
  }
}

absl::Status VulkanDevice::drain(std::unique_lock<std::mutex>& lock,
                                 const std::shared_ptr<Stream>& s) {
  if (auto st = submit(*s); !st.ok()) return st;
  const uint64_t value = s->submitted;
  lock.unlock();
  absl::Status st = wait(s, value);
  lock.lock();
  retire(*s);
  return st;
}

// ---- copies and fills ------------------------------------------------------------

absl::Status VulkanDevice::fill(Stream& s, SparkrtDevicePtr dst, Range range, uint8_t value,
                                uint64_t bytes) {
  // Whole words with vkCmdFillBuffer; the bytes before and after them with
  // the built-in kernel.
  const uint64_t start = range.offset;
  const uint64_t head = std::min<uint64_t>((4 - start % 4) % 4, bytes);
  const uint64_t middle = (bytes - head) / 4 * 4;
  const uint64_t tail = bytes - head - middle;
  auto bytes_kernel = [&](uint64_t at, uint64_t count) -> absl::Status {
    if (count == 0) return absl::OkStatus();
    auto pipeline = fill_bytes_->pipeline({kFillBlock, 1, 1}, 0);
    if (!pipeline.ok()) return pipeline.status();
    auto cmd = record(s);
    if (!cmd.ok()) return cmd.status();
    const FillArgs args{dst + at, value, static_cast<uint32_t>(count)};
    vk_.vkCmdBindPipeline(*cmd, VK_PIPELINE_BIND_POINT_COMPUTE, *pipeline);
    vk_.vkCmdPushConstants(*cmd, fill_bytes_->layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, sizeof(args),
                           &args);
    vk_.vkCmdDispatch(*cmd, 1, 1, 1);
    return command_recorded(s);
  };
  if (auto st = bytes_kernel(0, head); !st.ok()) return st;
  if (middle > 0) {
    auto cmd = record(s);
    if (!cmd.ok()) return cmd.status();
    vk_.vkCmdFillBuffer(*cmd, range.allocation->buffer, start + head, middle,
                        0x01010101u * value);
    if (auto st = command_recorded(s); !st.ok()) return st;
  }
  return bytes_kernel(head + middle, tail);
}

absl::Status VulkanDevice::copy_kernel(Stream& s, SparkrtDevicePtr dst, SparkrtDevicePtr src,
                                       uint64_t bytes) {
  auto pipeline = copy_bytes_->pipeline({kCopyBlock, 1, 1}, 0);
  if (!pipeline.ok()) return pipeline.status();
  for (uint64_t done = 0; done < bytes;) {
    const uint64_t n = std::min(kCopyChunkBytes, bytes - done);
    const CopyArgs args{dst + done, src + done, static_cast<uint32_t>(n / 16),
                        static_cast<uint32_t>(n % 16)};
    // Four vectors a thread; a grid-stride loop past the grid's limit.
    const uint64_t groups = std::clamp<uint64_t>((n / 16 + 4 * kCopyBlock - 1) / (4 * kCopyBlock),
                                                 1, props_.limits.maxComputeWorkGroupCount[0]);
    auto cmd = record(s);
    if (!cmd.ok()) return cmd.status();
    vk_.vkCmdBindPipeline(*cmd, VK_PIPELINE_BIND_POINT_COMPUTE, *pipeline);
    vk_.vkCmdPushConstants(*cmd, copy_bytes_->layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, sizeof(args),
                           &args);
    vk_.vkCmdDispatch(*cmd, static_cast<uint32_t>(groups), 1, 1);
    if (auto st = command_recorded(s); !st.ok()) return st;
    done += n;
  }
  return absl::OkStatus();
}

absl::Status VulkanDevice::memset(SparkrtDevicePtr dst, uint8_t value, uint64_t bytes,
                                  SparkrtStream stream, bool blocking) {
  std::unique_lock<std::mutex> lock(mu_);
  auto s = stream_of(stream);
  if (!s.ok()) return s.status();
  if (!blocking && graphs_.capturing(stream)) return graphs_.capture_memset(stream, dst, value, bytes);
  if (bytes == 0) return absl::OkStatus();
  auto range = resolve(dst, bytes, "memset");
  if (!range.ok()) return range.status();
  std::shared_ptr<Stream> target = blocking ? streams_.at(0) : *s;
  if (auto st = fill(*target, dst, *range, value, bytes); !st.ok()) return st;
  return blocking ? drain(lock, target) : absl::OkStatus();
}

absl::Status VulkanDevice::memcpy(const SparkrtMemcpyArgs& c) {
  std::unique_lock<std::mutex> lock(mu_);
  auto s = stream_of(c.stream);
  if (!s.ok()) return s.status();
  if (!c.blocking && graphs_.capturing(c.stream)) return graphs_.capture_copy(c.stream, c);
  if (c.bytes == 0) return absl::OkStatus();
  std::shared_ptr<Stream> target = c.blocking ? streams_.at(0) : *s;
  VkBuffer src = VK_NULL_HANDLE, dst = VK_NULL_HANDLE;
  VkBufferCopy region{0, 0, c.bytes};
  switch (c.kind) {
    case SPARKRT_COPY_D2D: {
      auto from = resolve(c.src_device, c.bytes, "memcpy source");
      if (!from.ok()) return from.status();
      auto to = resolve(c.dst_device, c.bytes, "memcpy destination");
      if (!to.ok()) return to.status();
      // copy_bytes where both ends are 16-byte aligned and the ranges are
      // apart; vkCmdCopyBuffer otherwise.
      const bool apart = from->allocation != to->allocation ||
                         c.src_device + c.bytes <= c.dst_device ||
                         c.dst_device + c.bytes <= c.src_device;
      if (apart && ((c.src_device | c.dst_device) & 15) == 0) {
        if (auto st = copy_kernel(*target, c.dst_device, c.src_device, c.bytes); !st.ok()) return st;
        return c.blocking ? drain(lock, target) : absl::OkStatus();
      }
      src = from->allocation->buffer, region.srcOffset = from->offset;
      dst = to->allocation->buffer, region.dstOffset = to->offset;
      break;
    }
    case SPARKRT_COPY_H2D: {
      auto to = resolve(c.dst_device, c.bytes, "memcpy destination");
      if (!to.ok()) return to.status();
      uint64_t offset = 0;
      const PinnedBuffer* pinned = pinned_containing(c.src_host, c.bytes, offset);
      if (pinned == nullptr) return copy_through_host(lock, c, target);
      src = pinned->buffer, region.srcOffset = offset;
      dst = to->allocation->buffer, region.dstOffset = to->offset;
      break;
    }
    case SPARKRT_COPY_D2H: {
      auto from = resolve(c.src_device, c.bytes, "memcpy source");
      if (!from.ok()) return from.status();
      uint64_t offset = 0;
      const PinnedBuffer* pinned = pinned_containing(c.dst_host, c.bytes, offset);
      if (pinned == nullptr) return copy_through_host(lock, c, target);
      src = from->allocation->buffer, region.srcOffset = from->offset;
      dst = pinned->buffer, region.dstOffset = offset;
      break;
    }
    default:
      return absl::InvalidArgumentError(
          absl::StrFormat("vulkan: memcpy: unknown copy kind %d", static_cast<int>(c.kind)));
  }
  auto cmd = record(*target);
  if (!cmd.ok()) return cmd.status();
  vk_.vkCmdCopyBuffer(*cmd, src, dst, 1, &region);
  if (auto st = command_recorded(*target); !st.ok()) return st;
  return c.blocking ? drain(lock, target) : absl::OkStatus();
}

absl::Status VulkanDevice::copy_through_host(std::unique_lock<std::mutex>& lock,
                                             const SparkrtMemcpyArgs& c,
                                             const std::shared_ptr<Stream>& s) {
  // After the stream's earlier work (and, for a blocking copy, the default
  // stream's: then `s` is it), through mapped memory or the staging buffer.
  if (auto st = drain(lock, s); !st.ok()) return st;
  const bool to_device = c.kind == SPARKRT_COPY_H2D;
  const SparkrtDevicePtr device_ptr = to_device ? c.dst_device : c.src_device;
  lock.unlock();
  std::lock_guard<std::mutex> staging_lock(staging_mu_);
  lock.lock();
  for (uint64_t done = 0; done < c.bytes;) {
    auto range = resolve(device_ptr + done, c.bytes - done, "memcpy");
    if (!range.ok()) return range.status();
    if (range->allocation->mapped != nullptr) {
      std::byte* mapped = range->allocation->mapped + (range->offset - range->allocation->offset);
      if (to_device) {
        std::memcpy(mapped, static_cast<const std::byte*>(c.src_host) + done, c.bytes - done);
      } else {
        std::memcpy(static_cast<std::byte*>(c.dst_host) + done, mapped, c.bytes - done);
      }
      return absl::OkStatus();
    }
    if (staging_.buffer == VK_NULL_HANDLE) {
      staging_.bytes = std::min(kStagingBytes, max_allocation_);
      if (auto st = make_mapped_buffer(
              staging_.bytes, VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT,
              false, "staging", staging_.buffer, staging_.memory, staging_.mapped);
          !st.ok())
        return st;
    }
    const uint64_t n = std::min(staging_.bytes, c.bytes - done);
    if (to_device) std::memcpy(staging_.mapped, static_cast<const std::byte*>(c.src_host) + done, n);
    auto cmd = record(*s);
    if (!cmd.ok()) return cmd.status();
    const VkBufferCopy region{to_device ? 0 : range->offset, to_device ? range->offset : 0, n};
    vk_.vkCmdCopyBuffer(*cmd, to_device ? staging_.buffer : range->allocation->buffer,
                        to_device ? range->allocation->buffer : staging_.buffer, 1, &region);
    if (auto st = command_recorded(*s); !st.ok()) return st;
    if (auto st = drain(lock, s); !st.ok()) return st;
    if (!to_device) std::memcpy(static_cast<std::byte*>(c.dst_host) + done, staging_.mapped, n);
    done += n;
  }
  return absl::OkStatus();
}

// ---- events --------------------------------------------------------------------

absl::StatusOr<uint32_t> VulkanDevice::take_query_slot() {
  if (free_queries_.empty()) {
    auto info = vk_struct<VkQueryPoolCreateInfo>(VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO);
    info.queryType = VK_QUERY_TYPE_TIMESTAMP;
    info.queryCount = kQueriesPerPool;
    VkQueryPool pool = VK_NULL_HANDLE;
    if (VkResult r = vk_.vkCreateQueryPool(device_, &info, nullptr, &pool); r != VK_SUCCESS)
      return vk_error(r, "vkCreateQueryPool (events)");
    query_pools_.push_back(pool);
    for (uint32_t i = kQueriesPerPool; i-- > 0;) free_queries_.push_back(queries_made_ + i);
    queries_made_ += kQueriesPerPool;
  }
  const uint32_t slot = free_queries_.back();
  free_queries_.pop_back();
  return slot;
}

absl::Status VulkanDevice::check_event(SparkrtEvent event) const {
  if (events_.contains(event)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrFormat(
      "vulkan: unknown event %d (never created on this device, or destroyed)", event));
}

absl::StatusOr<SparkrtEvent> VulkanDevice::create_event() {
  std::lock_guard<std::mutex> lock(mu_);
  auto slot = take_query_slot();
  if (!slot.ok()) return slot.status();
  const SparkrtEvent e = next_event_++;
  events_[e].query = *slot;
  return e;
}

absl::Status VulkanDevice::destroy_event(SparkrtEvent event) {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto s = check_event(event); !s.ok()) return s;
  // A timestamp still to be written keeps its slot until the stream is past it.
  Event& e = events_[event];
  if (e.stream == nullptr || e.stream->submitted >= e.value) {
    uint64_t done = 0;
    if (e.stream == nullptr ||
        (vk_.vkGetSemaphoreCounterValue(device_, e.stream->timeline, &done) == VK_SUCCESS &&
         done >= e.value))
      free_queries_.push_back(e.query);
  }
  events_.erase(event);
  return absl::OkStatus();
}

absl::Status VulkanDevice::record_event(SparkrtEvent event, SparkrtStream stream) {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto s = check_event(event); !s.ok()) return s;
  auto s = stream_of(stream);
  if (!s.ok()) return s.status();
  Event& e = events_[event];
  auto cmd = record(**s);
  if (!cmd.ok()) return cmd.status();
  if (timestamp_bits_ > 0) {
    VkQueryPool pool = query_pools_[e.query / kQueriesPerPool];
    const uint32_t index = e.query % kQueriesPerPool;
    vk_.vkCmdResetQueryPool(*cmd, pool, index, 1);
    vk_.vkCmdWriteTimestamp(*cmd, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, pool, index);
  }
  e.stream = *s;
  e.value = (*s)->submitted + 1;  // the open batch's
  return command_recorded(**s);
}

absl::Status VulkanDevice::synchronize_event(SparkrtEvent event) {
  std::unique_lock<std::mutex> lock(mu_);
  if (auto s = check_event(event); !s.ok()) return s;
  const Event e = events_[event];
  if (e.stream == nullptr) return absl::OkStatus();  // never recorded: nothing to wait for
  if (e.stream->submitted < e.value) {
    if (auto st = submit(*e.stream); !st.ok()) return st;
  }
  lock.unlock();
  return wait(e.stream, e.value);
}

absl::Status VulkanDevice::wait_event(SparkrtStream stream, SparkrtEvent event) {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto s = check_event(event); !s.ok()) return s;
  auto s = stream_of(stream);
  if (!s.ok()) return s.status();
  const Event e = events_[event];
  if (e.stream == nullptr || e.stream == *s) return absl::OkStatus();
  if (e.stream->submitted < e.value) {
    if (auto st = submit(*e.stream); !st.ok()) return st;
  }
  // Only work queued from now on waits: what is already recorded goes first.
  if (auto st = submit(**s); !st.ok()) return st;
  (*s)->waits.emplace_back(e.stream->timeline, e.value);
  (*s)->wait_holds.push_back(e.stream);
  return absl::OkStatus();
}

absl::StatusOr<float> VulkanDevice::elapsed_ms(SparkrtEvent start, SparkrtEvent end) {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto s = check_event(start); !s.ok()) return s;
  if (auto s = check_event(end); !s.ok()) return s;
  const Event a = events_[start], b = events_[end];
  if (a.stream == nullptr || b.stream == nullptr)
    return absl::FailedPreconditionError(absl::StrFormat(
        "vulkan: elapsed_ms(%d, %d): both events must be recorded first", start, end));
  if (timestamp_bits_ == 0)
    return absl::UnimplementedError("vulkan: this device's compute queue has no timestamps");
  uint64_t ticks[2];
  for (int i = 0; i < 2; ++i) {
    const Event& e = i == 0 ? a : b;
    uint64_t done = 0;
    if (vk_.vkGetSemaphoreCounterValue(device_, e.stream->timeline, &done) != VK_SUCCESS ||
        done < e.value)
      return absl::FailedPreconditionError(absl::StrFormat(
          "vulkan: elapsed_ms(%d, %d): event %d has not completed; synchronize it first", start,
          end, i == 0 ? start : end));
    if (VkResult r = vk_.vkGetQueryPoolResults(
            device_, query_pools_[e.query / kQueriesPerPool], e.query % kQueriesPerPool, 1,
            sizeof(uint64_t), &ticks[i], sizeof(uint64_t), VK_QUERY_RESULT_64_BIT);
        r != VK_SUCCESS)
      return vk_error(r, "vkGetQueryPoolResults (event timestamps)");
  }
  const uint64_t mask = timestamp_bits_ >= 64 ? ~uint64_t{0} : (uint64_t{1} << timestamp_bits_) - 1;
  const uint64_t forward = (ticks[1] - ticks[0]) & mask;
  // A difference above half the range is end before start: negative.
  const double signed_ticks = forward > mask / 2 ? -static_cast<double>((mask - forward) + 1)
                                                 : static_cast<double>(forward);
  return static_cast<float>(signed_ticks * props_.limits.timestampPeriod / 1e6);
}

// ---- launch ----------------------------------------------------------------------

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
