// The Vulkan backend: every physical device the loader reports (Vulkan 1.2
// or later, with device addresses and timeline semaphores), running the
// modules' SPIR-V. `auto` tries it after cuda and before cpu.
#include <memory>
#include <mutex>

#include "sparkrt/sdk/graph_recorder.h"
#include "vulkan_device.h"

namespace sparkrt::vulkan {
namespace {

// The instance lives until the process exits and is never destroyed: the
// plugin is linked with -z nodelete, so a plugin loaded again finds it, and
// the loader and driver it holds are not made to be unloaded and set up
// again within one process.
class VulkanBackend final : public sdk::Backend {
 public:
  absl::StatusOr<int> device_count() override {
    auto inst = instance();
    if (!inst.ok()) return inst.status();
    uint32_t n = 0;
    if (VkResult r = (*inst)->vkEnumeratePhysicalDevices((*inst)->instance, &n, nullptr);
        r != VK_SUCCESS)
      return vk_error(r, "vkEnumeratePhysicalDevices");
    if (n == 0)
      return absl::NotFoundError(
          "vulkan: the loader found no Vulkan device (no driver installed? Debian: "
          "mesa-vulkan-drivers; NVIDIA: VK_DRIVER_FILES naming its ICD JSON)");
    return static_cast<int>(n);
  }

  absl::StatusOr<std::unique_ptr<sdk::Device>> open_device(int index) override {
    auto inst = instance();
    if (!inst.ok()) return inst.status();
    auto device = VulkanDevice::open(**inst, index);
    if (!device.ok()) return device.status();
    return std::unique_ptr<sdk::Device>(std::move(*device));
  }

  const void* extension(std::string_view name) override {
    return name == SPARKRT_GRAPH_EXTENSION_NAME ? sdk::recorded_graph_extension() : nullptr;
  }

 private:
  // Created on first use and kept: the loader and driver are set up once per process.
  absl::StatusOr<const Instance*> instance() {
    std::call_once(once_, [this] { instance_ = create_instance(); });
    if (!instance_.ok()) return instance_.status();
    return &*instance_;
  }

  std::once_flag once_;
  absl::StatusOr<Instance> instance_ = absl::UnknownError("not created");  // never destroyed
};

}  // namespace
}  // namespace sparkrt::vulkan

SPARKRT_DEFINE_PLUGIN(sparkrt::vulkan::VulkanBackend, "vulkan", SPARKRT_VERSION)
