#include "vulkan_api.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "absl/strings/str_format.h"

namespace sparkrt::vulkan {
namespace {

constexpr char kDefaultLoader[] = "libvulkan.so.1";
constexpr char kValidationLayer[] = "VK_LAYER_KHRONOS_validation";

bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && std::strcmp(v, "1") == 0;
}

VKAPI_ATTR VkBool32 VKAPI_CALL report(VkDebugUtilsMessageSeverityFlagBitsEXT severity,
                                      VkDebugUtilsMessageTypeFlagsEXT,
                                      const VkDebugUtilsMessengerCallbackDataEXT* data, void*) {
  // The layer sums the shared memory of every entry point of a module, not
  // the one a pipeline uses (Vulkan-ValidationLayers issue 6961): a module of
  // several kernels trips it though each fits. The driver still refuses a
  // kernel that does not fit, when its pipeline is created.
  if (data != nullptr && data->pMessageIdName != nullptr &&
      std::strcmp(data->pMessageIdName, "VUID-RuntimeSpirv-Workgroup-06530") == 0)
    return VK_FALSE;
  const char* level = severity >= VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT ? "error" : "warning";
  std::fprintf(stderr, "sparkrt vulkan validation: %s: %s\n", level,
               data != nullptr && data->pMessage != nullptr ? data->pMessage : "(no message)");
  return VK_FALSE;
}

bool has_layer(PFN_vkEnumerateInstanceLayerProperties enumerate, const char* name) {
  uint32_t n = 0;
  if (enumerate(&n, nullptr) != VK_SUCCESS) return false;
  std::vector<VkLayerProperties> layers(n);
  if (enumerate(&n, layers.data()) != VK_SUCCESS) return false;
  for (const auto& l : layers)
    if (std::strcmp(l.layerName, name) == 0) return true;
  return false;
}

// Undoes a partly created instance.
void destroy_instance(Instance& inst) {
  if (inst.messenger != VK_NULL_HANDLE && inst.vkDestroyDebugUtilsMessengerEXT != nullptr)
    inst.vkDestroyDebugUtilsMessengerEXT(inst.instance, inst.messenger, nullptr);
  if (inst.instance != VK_NULL_HANDLE && inst.vkDestroyInstance != nullptr)
    inst.vkDestroyInstance(inst.instance, nullptr);
  if (inst.library != nullptr) dlclose(inst.library);
  inst = Instance{};
}

}  // namespace

const char* result_name(VkResult r) {
  switch (r) {
#define CASE(x) \
  case x:       \
    return #x;
    CASE(VK_SUCCESS)
    CASE(VK_NOT_READY)
    CASE(VK_TIMEOUT)
    CASE(VK_INCOMPLETE)
    CASE(VK_ERROR_OUT_OF_HOST_MEMORY)
    CASE(VK_ERROR_OUT_OF_DEVICE_MEMORY)
    CASE(VK_ERROR_INITIALIZATION_FAILED)
    CASE(VK_ERROR_DEVICE_LOST)
    CASE(VK_ERROR_MEMORY_MAP_FAILED)
    CASE(VK_ERROR_LAYER_NOT_PRESENT)
    CASE(VK_ERROR_EXTENSION_NOT_PRESENT)
    CASE(VK_ERROR_FEATURE_NOT_PRESENT)
    CASE(VK_ERROR_INCOMPATIBLE_DRIVER)
    CASE(VK_ERROR_TOO_MANY_OBJECTS)
    CASE(VK_ERROR_FORMAT_NOT_SUPPORTED)
    CASE(VK_ERROR_FRAGMENTED_POOL)
    CASE(VK_ERROR_OUT_OF_POOL_MEMORY)
    CASE(VK_ERROR_INVALID_SHADER_NV)
    CASE(VK_ERROR_INVALID_OPAQUE_CAPTURE_ADDRESS)
#undef CASE
    default:
      return "VkResult (unknown)";
  }
}

absl::Status vk_error(VkResult r, const std::string& what) {
  const std::string message = absl::StrFormat("vulkan: %s failed: %s (%d)", what, result_name(r),
                                              static_cast<int>(r));
  switch (r) {
    case VK_ERROR_OUT_OF_HOST_MEMORY:
    case VK_ERROR_OUT_OF_DEVICE_MEMORY:
    case VK_ERROR_TOO_MANY_OBJECTS:
    case VK_ERROR_OUT_OF_POOL_MEMORY:
      return absl::ResourceExhaustedError(message);
    case VK_ERROR_DEVICE_LOST:
    case VK_ERROR_INITIALIZATION_FAILED:
    case VK_ERROR_INCOMPATIBLE_DRIVER:
      return absl::UnavailableError(message);
    case VK_ERROR_INVALID_SHADER_NV:
      return absl::InvalidArgumentError(message);
    default:
      return absl::InternalError(message);
  }
}

absl::StatusOr<Instance> create_instance() {
  Instance inst;
  const char* env = std::getenv("SPARKRT_VULKAN_LOADER");
  inst.library_name = env != nullptr && *env != '\0' ? env : kDefaultLoader;
  inst.library = dlopen(inst.library_name.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (inst.library == nullptr) {
    const char* why = dlerror();
    return absl::UnavailableError(absl::StrFormat(
        "vulkan: no Vulkan loader: dlopen(%s) failed: %s. Install one (Debian: libvulkan1, plus "
        "a driver such as mesa-vulkan-drivers) or set SPARKRT_VULKAN_LOADER to its path",
        inst.library_name, why != nullptr ? why : "unknown error"));
  }
  inst.vkGetInstanceProcAddr =
      reinterpret_cast<PFN_vkGetInstanceProcAddr>(dlsym(inst.library, "vkGetInstanceProcAddr"));
  const auto fail = [&](absl::Status s) {
    destroy_instance(inst);
    return s;
  };
  if (inst.vkGetInstanceProcAddr == nullptr)
    return fail(absl::UnavailableError(absl::StrFormat(
        "vulkan: %s has no vkGetInstanceProcAddr; it is not a Vulkan loader", inst.library_name)));
  const auto global = [&](const char* name) { return inst.vkGetInstanceProcAddr(nullptr, name); };
  auto enumerate_version =
      reinterpret_cast<PFN_vkEnumerateInstanceVersion>(global("vkEnumerateInstanceVersion"));
  auto create = reinterpret_cast<PFN_vkCreateInstance>(global("vkCreateInstance"));
  auto enumerate_layers = reinterpret_cast<PFN_vkEnumerateInstanceLayerProperties>(
      global("vkEnumerateInstanceLayerProperties"));
  uint32_t version = VK_API_VERSION_1_0;
  if (enumerate_version != nullptr) enumerate_version(&version);
  if (create == nullptr ||
      (VK_API_VERSION_MAJOR(version) == 1 && VK_API_VERSION_MINOR(version) < 2))
    return fail(absl::UnavailableError(absl::StrFormat(
        "vulkan: the loader %s offers Vulkan %d.%d; sparkrt needs 1.2 or later",
        inst.library_name, VK_API_VERSION_MAJOR(version), VK_API_VERSION_MINOR(version))));

  std::vector<const char*> layers, extensions;
  if (env_flag("SPARKRT_VULKAN_VALIDATION")) {
    if (enumerate_layers == nullptr || !has_layer(enumerate_layers, kValidationLayer))
      return fail(absl::FailedPreconditionError(
          "vulkan: SPARKRT_VULKAN_VALIDATION=1 but the Khronos validation layer is not installed "
          "(Debian: vulkan-validationlayers)"));
    layers.push_back(kValidationLayer);
    extensions.push_back(VK_EXT_DEBUG_UTILS_EXTENSION_NAME);
    inst.validation = true;
  }
  auto app = vk_struct<VkApplicationInfo>(VK_STRUCTURE_TYPE_APPLICATION_INFO);
  app.pApplicationName = "sparkrt";
  app.pEngineName = "sparkrt";
  app.apiVersion = VK_API_VERSION_1_2;
  auto messenger = vk_struct<VkDebugUtilsMessengerCreateInfoEXT>(VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT);
  messenger.messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT |
                              VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT;
  messenger.messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                          VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT;
  messenger.pfnUserCallback = report;
  auto info = vk_struct<VkInstanceCreateInfo>(VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO);
  info.pNext = inst.validation ? &messenger : nullptr;
  info.pApplicationInfo = &app;
  info.enabledLayerCount = static_cast<uint32_t>(layers.size());
  info.ppEnabledLayerNames = layers.data();
  info.enabledExtensionCount = static_cast<uint32_t>(extensions.size());
  info.ppEnabledExtensionNames = extensions.data();
  if (VkResult r = create(&info, nullptr, &inst.instance); r != VK_SUCCESS) {
    inst.instance = VK_NULL_HANDLE;
    return fail(vk_error(r, "vkCreateInstance (is a Vulkan driver installed? Debian: "
                            "mesa-vulkan-drivers; NVIDIA: VK_DRIVER_FILES naming its ICD)"));
  }
#define SPARKRT_VK_RESOLVE(name)                                                          \
  inst.name = reinterpret_cast<PFN_##name>(inst.vkGetInstanceProcAddr(inst.instance, #name)); \
  if (inst.name == nullptr)                                                               \
    return fail(absl::UnavailableError("vulkan: the loader lacks " #name));
  SPARKRT_VK_INSTANCE_FUNCTIONS(SPARKRT_VK_RESOLVE)
#undef SPARKRT_VK_RESOLVE
  if (inst.validation) {
    auto make = reinterpret_cast<PFN_vkCreateDebugUtilsMessengerEXT>(
        inst.vkGetInstanceProcAddr(inst.instance, "vkCreateDebugUtilsMessengerEXT"));
    inst.vkDestroyDebugUtilsMessengerEXT = reinterpret_cast<PFN_vkDestroyDebugUtilsMessengerEXT>(
        inst.vkGetInstanceProcAddr(inst.instance, "vkDestroyDebugUtilsMessengerEXT"));
    if (make != nullptr) make(inst.instance, &messenger, nullptr, &inst.messenger);
  }
  return inst;
}

absl::StatusOr<DeviceFunctions> load_device_functions(const Instance& inst, VkDevice device,
                                                      bool pipeline_executable_properties) {
  DeviceFunctions f;
#define SPARKRT_VK_RESOLVE(name)                                                       \
  f.name = reinterpret_cast<PFN_##name>(inst.vkGetDeviceProcAddr(device, #name));      \
  if (f.name == nullptr) return absl::UnavailableError("vulkan: the driver lacks " #name);
  SPARKRT_VK_DEVICE_FUNCTIONS(SPARKRT_VK_RESOLVE)
#undef SPARKRT_VK_RESOLVE
  // Optional: the caller checks for null.
#define SPARKRT_VK_RESOLVE_OPTIONAL(name) \
  f.name = reinterpret_cast<PFN_##name>(inst.vkGetDeviceProcAddr(device, #name));
  if (pipeline_executable_properties) {
    SPARKRT_VK_PIPELINE_EXECUTABLE_FUNCTIONS(SPARKRT_VK_RESOLVE_OPTIONAL)
  }
#undef SPARKRT_VK_RESOLVE_OPTIONAL
  return f;
}

}  // namespace sparkrt::vulkan
