// A minimal working backend for selection tests: one device that reports
// its name and refuses everything else. Built twice: "fakegpu" (one device)
// and "nodevice" (device_count fails, as a backend without hardware does).
#include "sparkrt/plugin_sdk.h"

#include <cstring>

namespace {

absl::Status unsupported() { return absl::UnimplementedError("the fake test backend only opens"); }

class FakeDevice final : public sparkrt::sdk::Device {
 public:
  absl::Status properties(SparkrtDeviceProperties& out) override {
    std::strncpy(out.name, "fake test device", sizeof(out.name) - 1);
    out.max_threads_per_block = 1024;
    for (int i = 0; i < 3; ++i) out.max_block_dim[i] = out.max_grid_dim[i] = 1024;
    out.image_formats = 1u << SPARKRT_IMAGE_PTX;
    return absl::OkStatus();
  }
  absl::StatusOr<std::unique_ptr<sparkrt::sdk::Module>> load_module(
      std::string_view, SparkrtImageFormat, std::span<const std::byte>) override {
    return unsupported();
  }
  absl::StatusOr<SparkrtDevicePtr> alloc(uint64_t) override { return unsupported(); }
  absl::Status free(SparkrtDevicePtr) override { return unsupported(); }
  absl::Status memset(SparkrtDevicePtr, uint8_t, uint64_t, SparkrtStream, bool) override {
    return unsupported();
  }
  absl::Status memcpy(const SparkrtMemcpyArgs&) override { return unsupported(); }
  absl::StatusOr<SparkrtStream> create_stream() override { return unsupported(); }
  absl::Status destroy_stream(SparkrtStream) override { return unsupported(); }
  absl::Status synchronize(SparkrtStream) override { return unsupported(); }
  absl::StatusOr<SparkrtEvent> create_event() override { return unsupported(); }
  absl::Status destroy_event(SparkrtEvent) override { return unsupported(); }
  absl::Status record_event(SparkrtEvent, SparkrtStream) override { return unsupported(); }
  absl::Status synchronize_event(SparkrtEvent) override { return unsupported(); }
  absl::Status wait_event(SparkrtStream, SparkrtEvent) override { return unsupported(); }
  absl::StatusOr<float> elapsed_ms(SparkrtEvent, SparkrtEvent) override { return unsupported(); }
  absl::Status launch(const sparkrt::sdk::Launch&) override { return unsupported(); }
};

class FakeBackend final : public sparkrt::sdk::Backend {
 public:
  absl::StatusOr<int> device_count() override {
#ifdef FAKE_NO_DEVICE
    return absl::UnavailableError("no fake hardware present");
#else
    return 1;
#endif
  }
  absl::StatusOr<std::unique_ptr<sparkrt::sdk::Device>> open_device(int) override {
    return std::make_unique<FakeDevice>();
  }
};

}  // namespace

SPARKRT_DEFINE_PLUGIN(FakeBackend, FAKE_NAME, "1.0.0")
