// The Vulkan functions the backend calls, resolved at run time from the
// loader (libvulkan.so.1, or SPARKRT_VULKAN_LOADER), so that the plugin loads
// on machines without one and says why there is no device.
#ifndef SPARKRT_BACKENDS_VULKAN_VULKAN_API_H_
#define SPARKRT_BACKENDS_VULKAN_VULKAN_API_H_

#define VK_NO_PROTOTYPES
#include <vulkan/vulkan.h>

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace sparkrt::vulkan {

// Global and instance-level functions (resolved through vkGetInstanceProcAddr).
#define SPARKRT_VK_INSTANCE_FUNCTIONS(X)   \
  X(vkDestroyInstance)                     \
  X(vkEnumeratePhysicalDevices)            \
  X(vkGetPhysicalDeviceProperties)         \
  X(vkGetPhysicalDeviceProperties2)        \
  X(vkGetPhysicalDeviceFeatures2)          \
  X(vkGetPhysicalDeviceQueueFamilyProperties) \
  X(vkGetPhysicalDeviceMemoryProperties)   \
  X(vkEnumerateDeviceExtensionProperties)  \
  X(vkCreateDevice)                        \
  X(vkGetDeviceProcAddr)

#define SPARKRT_VK_DEVICE_FUNCTIONS(X)  \
  X(vkDestroyDevice)                    \
  X(vkGetDeviceQueue)                   \
  X(vkDeviceWaitIdle)                   \
  X(vkCreateBuffer)                     \
  X(vkDestroyBuffer)                    \
  X(vkGetBufferMemoryRequirements)      \
  X(vkAllocateMemory)                   \
  X(vkFreeMemory)                       \
  X(vkBindBufferMemory)                 \
  X(vkMapMemory)                        \
  X(vkUnmapMemory)                      \
  X(vkGetBufferDeviceAddress)           \
  X(vkCreateCommandPool)                \
  X(vkDestroyCommandPool)               \
  X(vkAllocateCommandBuffers)           \
  X(vkFreeCommandBuffers)               \
  X(vkResetCommandBuffer)               \
  X(vkBeginCommandBuffer)               \
  X(vkEndCommandBuffer)                 \
  X(vkCmdCopyBuffer)                    \
  X(vkCmdFillBuffer)                    \
  X(vkCmdPipelineBarrier)               \
  X(vkCmdBindPipeline)                  \
  X(vkCmdPushConstants)                 \
  X(vkCmdDispatch)                      \
  X(vkCmdWriteTimestamp)                \
  X(vkCmdResetQueryPool)                \
  X(vkCreateQueryPool)                  \
  X(vkDestroyQueryPool)                 \
  X(vkGetQueryPoolResults)              \
  X(vkCreateSemaphore)                  \
  X(vkDestroySemaphore)                 \
  X(vkWaitSemaphores)                   \
  X(vkGetSemaphoreCounterValue)         \
  X(vkQueueSubmit)                      \
  X(vkQueueBindSparse)                  \
  X(vkCreateFence)                      \
  X(vkDestroyFence)                     \
  X(vkWaitForFences)                    \
  X(vkCreateShaderModule)               \
  X(vkDestroyShaderModule)              \
  X(vkCreatePipelineLayout)             \
  X(vkDestroyPipelineLayout)            \
  X(vkCreateComputePipelines)           \
  X(vkDestroyPipeline)

// VK_KHR_pipeline_executable_properties, resolved only where the device has
// the extension enabled, and left null where the driver lacks one.
#define SPARKRT_VK_PIPELINE_EXECUTABLE_FUNCTIONS(X) \
  X(vkGetPipelineExecutablePropertiesKHR)           \
  X(vkGetPipelineExecutableStatisticsKHR)

#define SPARKRT_VK_MEMBER(name) PFN_##name name = nullptr;

// The loader and the instance every device of the process shares.
struct Instance {
  void* library = nullptr;
  std::string library_name;
  VkInstance instance = VK_NULL_HANDLE;
  bool validation = false;  // the Khronos validation layer is on
  VkDebugUtilsMessengerEXT messenger = VK_NULL_HANDLE;
  PFN_vkGetInstanceProcAddr vkGetInstanceProcAddr = nullptr;
  PFN_vkDestroyDebugUtilsMessengerEXT vkDestroyDebugUtilsMessengerEXT = nullptr;
  SPARKRT_VK_INSTANCE_FUNCTIONS(SPARKRT_VK_MEMBER)
};

// Device-level functions of one VkDevice.
struct DeviceFunctions {
  SPARKRT_VK_DEVICE_FUNCTIONS(SPARKRT_VK_MEMBER)
  SPARKRT_VK_PIPELINE_EXECUTABLE_FUNCTIONS(SPARKRT_VK_MEMBER)
};

// Opens the loader and creates the instance (Vulkan 1.2 or later). With
// SPARKRT_VULKAN_VALIDATION=1 the Khronos validation layer is enabled and
// each message it reports is written to stderr prefixed "sparkrt vulkan
// validation:" (the tests fail on that text).
// The instance is meant to live until the process exits (vulkan_backend.cc).
absl::StatusOr<Instance> create_instance();

// Every function of SPARKRT_VK_DEVICE_FUNCTIONS (an error names the first one
// the driver lacks) and, with `pipeline_executable_properties` (the device was
// created with that extension), those of SPARKRT_VK_PIPELINE_EXECUTABLE_FUNCTIONS.
absl::StatusOr<DeviceFunctions> load_device_functions(const Instance& instance, VkDevice device,
                                                      bool pipeline_executable_properties);

// A Vulkan info struct of type `type`, every other field zero.
template <typename T>
T vk_struct(VkStructureType type, void* next = nullptr) {
  T value{};
  value.sType = type;
  value.pNext = next;
  return value;
}

// "VK_ERROR_OUT_OF_DEVICE_MEMORY", for messages.
const char* result_name(VkResult result);

// An error for a failed call, coded by what the result means.
absl::Status vk_error(VkResult result, const std::string& what);

}  // namespace sparkrt::vulkan

#endif  // SPARKRT_BACKENDS_VULKAN_VULKAN_API_H_
