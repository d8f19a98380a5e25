// A plugin of ABI 1.3, the last minor version without launch attributes: it
// declares abi_minor 3 and holds the runtime to that version's struct sizes.
// It refuses a device-properties or launch struct of any size but 1.3's
// (a newer runtime must send an old plugin the structs it knows), and
// otherwise loads modules, resolves kernels and accepts launches without
// running them.
#include <memory>

#include "absl/strings/str_format.h"
#include "refusing_device.h"

namespace {

constexpr uint32_t kAbiMinor = 3;

class OldKernel final : public sparkrt::sdk::Kernel {};

class OldModule final : public sparkrt::sdk::Module {
 public:
  absl::StatusOr<sparkrt::sdk::Kernel*> get_kernel(
      std::string_view, std::span<const SparkrtParamInfo>) override {
    return &kernel_;
  }

 private:
  OldKernel kernel_;
};

class OldDevice final : public sparkrt::testing::RefusingDevice {
 public:
  OldDevice() : RefusingDevice("ABI 1.3 test device", "the ABI 1.3 test backend only launches") {}

  absl::Status properties(SparkrtDeviceProperties& out) override {
    if (auto s = RefusingDevice::properties(out); !s.ok()) return s;
    out.image_formats = (1u << SPARKRT_IMAGE_PTX) | (1u << SPARKRT_IMAGE_SIGNATURES);
    return absl::OkStatus();
  }
  absl::StatusOr<std::unique_ptr<sparkrt::sdk::Module>> load_module(
      std::string_view, SparkrtImageFormat, std::span<const std::byte>) override {
    return std::make_unique<OldModule>();
  }
  absl::Status launch(const sparkrt::sdk::Launch&) override { return absl::OkStatus(); }
};

class OldBackend final : public sparkrt::sdk::Backend {
 public:
  absl::StatusOr<int> device_count() override { return 1; }
  absl::StatusOr<std::unique_ptr<sparkrt::sdk::Device>> open_device(int) override {
    return std::make_unique<OldDevice>();
  }
};

SparkrtError* wrong_size(const char* call, size_t given, size_t expected) {
  return sparkrt::sdk::detail::to_error(absl::InvalidArgumentError(absl::StrFormat(
      "%s: struct_size %d, but a plugin of ABI 1.3 is sent %d bytes", call, given, expected)));
}

const SparkrtPluginApi* sdk_table() {
  return sparkrt::sdk::detail::make_api<OldBackend>("oldabi", "1.3.0");
}

SparkrtError* get_properties(SparkrtDeviceGetPropertiesArgs* a) {
  if (a != nullptr && a->properties != nullptr &&
      a->properties->struct_size != SPARKRT_DEVICE_PROPERTIES_SIZE_1_3)
    return wrong_size("device_get_properties", a->properties->struct_size,
                      SPARKRT_DEVICE_PROPERTIES_SIZE_1_3);
  return sdk_table()->device_get_properties(a);
}

SparkrtError* launch(SparkrtLaunchArgs* a) {
  if (a != nullptr && a->struct_size != SPARKRT_LAUNCH_ARGS_SIZE_1_3)
    return wrong_size("launch", a->struct_size, SPARKRT_LAUNCH_ARGS_SIZE_1_3);
  return sdk_table()->launch(a);
}

SparkrtPluginApi make_table() {
  SparkrtPluginApi api = *sdk_table();
  api.abi_minor = kAbiMinor;
  api.device_get_properties = &get_properties;
  api.launch = &launch;
  return api;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) const SparkrtPluginApi* sparkrt_plugin_api(void) {
  static const SparkrtPluginApi api = make_table();
  return &api;
}
