// The Vulkan device: opening (features, queue, built-in kernels), its
// properties and modules. Memory, streams and events, copies and launches are
// in vulkan_memory.cc, vulkan_streams.cc, vulkan_copies.cc, vulkan_launch.cc.
#include "vulkan_device.h"

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <utility>

#include "absl/strings/str_format.h"
#include "vulkan_builtins.h"
#include "vulkan_stream.h"
// After <cstdint>: they declare uint32_t arrays.
#include "copy_bytes_spv.h"
#include "fill_bytes_spv.h"

namespace sparkrt::vulkan {
namespace {

namespace spirv = sdk::spirv;

bool has_extension(const std::vector<VkExtensionProperties>& list, const char* name) {
  return std::any_of(list.begin(), list.end(),
                     [&](const VkExtensionProperties& e) { return std::strcmp(e.extensionName, name) == 0; });
}

// SPARKRT_VULKAN_PIPELINE_STATS: 1 reports the compile statistics of every
// pipeline (README.md, "Pipeline statistics"); unset, empty or 0 does not.
absl::StatusOr<bool> pipeline_stats_requested() {
  const char* v = std::getenv("SPARKRT_VULKAN_PIPELINE_STATS");
  if (v == nullptr || *v == '\0' || std::strcmp(v, "0") == 0) return false;
  if (std::strcmp(v, "1") == 0) return true;
  return absl::InvalidArgumentError(absl::StrFormat(
      "vulkan: SPARKRT_VULKAN_PIPELINE_STATS='%s' is not 0 or 1; unset it, or set it to 1 to "
      "report each pipeline's compile statistics",
      v));
}

}  // namespace

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
  auto stats_requested = pipeline_stats_requested();
  if (!stats_requested.ok()) return stats_requested.status();
  auto subgroup = vk_struct<VkPhysicalDeviceSubgroupProperties>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES);
  auto maintenance3 = vk_struct<VkPhysicalDeviceMaintenance3Properties>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES);
  auto sm = vk_struct<VkPhysicalDeviceShaderSMBuiltinsPropertiesNV>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_SM_BUILTINS_PROPERTIES_NV);
  uint32_t n = 0;
  in.vkEnumerateDeviceExtensionProperties(physical_, nullptr, &n, nullptr);
  std::vector<VkExtensionProperties> extensions(n);
  in.vkEnumerateDeviceExtensionProperties(physical_, nullptr, &n, extensions.data());
  const bool nv_sm = has_extension(extensions, VK_NV_SHADER_SM_BUILTINS_EXTENSION_NAME);
  const bool executable_properties =
      has_extension(extensions, VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME);
  auto driver = vk_struct<VkPhysicalDeviceDriverProperties>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES);
  subgroup.pNext = &maintenance3;
  maintenance3.pNext = &driver;
  if (nv_sm) driver.pNext = &sm;
  auto props2 = vk_struct<VkPhysicalDeviceProperties2>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, &subgroup);
  in.vkGetPhysicalDeviceProperties2(physical_, &props2);
  props_ = props2.properties;
  const std::string name = props_.deviceName;
  if (VK_API_VERSION_MAJOR(props_.apiVersion) == 1 && VK_API_VERSION_MINOR(props_.apiVersion) < 2)
    return absl::FailedPreconditionError(absl::StrFormat(
        "vulkan: device %d (%s) offers Vulkan %d.%d; sparkrt needs 1.2 or later", index, name,
        VK_API_VERSION_MAJOR(props_.apiVersion), VK_API_VERSION_MINOR(props_.apiVersion)));
  driver_ = absl::StrFormat("Vulkan %d.%d.%d, %s %s", VK_API_VERSION_MAJOR(props_.apiVersion),
                            VK_API_VERSION_MINOR(props_.apiVersion),
                            VK_API_VERSION_PATCH(props_.apiVersion), driver.driverName,
                            driver.driverInfo);
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
  auto fexec = vk_struct<VkPhysicalDevicePipelineExecutablePropertiesFeaturesKHR>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PIPELINE_EXECUTABLE_PROPERTIES_FEATURES_KHR);
  auto f12 = vk_struct<VkPhysicalDeviceVulkan12Features>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES,
                                                         executable_properties ? &fexec : nullptr);
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
  // The driver's compile statistics of each pipeline, where it offers them:
  // enabled whenever present, captured only with SPARKRT_VULKAN_PIPELINE_STATS=1.
  std::vector<const char*> device_extensions;
  auto eexec = vk_struct<VkPhysicalDevicePipelineExecutablePropertiesFeaturesKHR>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PIPELINE_EXECUTABLE_PROPERTIES_FEATURES_KHR);
  const bool executable_info = executable_properties && fexec.pipelineExecutableInfo;
  if (executable_info) {
    eexec.pipelineExecutableInfo = VK_TRUE;
    e12.pNext = &eexec;
    device_extensions.push_back(VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME);
  }

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
  info.enabledExtensionCount = static_cast<uint32_t>(device_extensions.size());
  info.ppEnabledExtensionNames = device_extensions.data();
  if (VkResult r = in.vkCreateDevice(physical_, &info, nullptr, &device_); r != VK_SUCCESS) {
    device_ = VK_NULL_HANDLE;
    return vk_error(r, absl::StrFormat("vkCreateDevice(%s)", name));
  }
  auto functions = load_device_functions(in, device_, executable_info);
  if (!functions.ok()) return functions.status();
  vk_ = *functions;
  if (*stats_requested) {
    pipeline_statistics_ = executable_info && vk_.vkGetPipelineExecutablePropertiesKHR != nullptr &&
                           vk_.vkGetPipelineExecutableStatisticsKHR != nullptr;
    if (!pipeline_statistics_)
      std::fprintf(stderr,
                   "sparkrt vulkan: SPARKRT_VULKAN_PIPELINE_STATS=1, but device %d (%s) does not "
                   "offer VK_KHR_pipeline_executable_properties: no pipeline statistics\n",
                   index, name.c_str());
  }
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
  std::snprintf(out.driver, sizeof(out.driver), "%s", driver_.c_str());
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

}  // namespace sparkrt::vulkan
