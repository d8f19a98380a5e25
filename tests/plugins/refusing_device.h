// A test device that reports a name and small limits and refuses every other
// call with Unimplemented: the test plugins derive from it and implement only
// the calls their tests are about.
#ifndef SPARKRT_TESTS_PLUGINS_REFUSING_DEVICE_H_
#define SPARKRT_TESTS_PLUGINS_REFUSING_DEVICE_H_

#include <cstring>
#include <string>
#include <utility>

#include "sparkrt/plugin_sdk.h"

namespace sparkrt::testing {

class RefusingDevice : public sdk::Device {
 public:
  // `why` is every refusal's message ("the fake test backend only opens").
  RefusingDevice(std::string name, std::string why) : name_(std::move(name)), why_(std::move(why)) {}

  absl::Status properties(SparkrtDeviceProperties& out) override {
    std::strncpy(out.name, name_.c_str(), sizeof(out.name) - 1);
    out.max_threads_per_block = 1024;
    for (int i = 0; i < 3; ++i) out.max_block_dim[i] = out.max_grid_dim[i] = 1024;
    out.image_formats = 1u << SPARKRT_IMAGE_PTX;
    return absl::OkStatus();
  }

  absl::StatusOr<std::unique_ptr<sdk::Module>> load_module(std::string_view, SparkrtImageFormat,
                                                           std::span<const std::byte>) override {
    return refuse();
  }
  absl::StatusOr<SparkrtDevicePtr> alloc(uint64_t) override { return refuse(); }
  absl::Status free(SparkrtDevicePtr) override { return refuse(); }
  absl::Status memset(SparkrtDevicePtr, uint8_t, uint64_t, SparkrtStream, bool) override {
    return refuse();
  }
  absl::Status memcpy(const SparkrtMemcpyArgs&) override { return refuse(); }
  absl::StatusOr<SparkrtStream> create_stream() override { return refuse(); }
  absl::Status destroy_stream(SparkrtStream) override { return refuse(); }
  absl::Status synchronize(SparkrtStream) override { return refuse(); }
  absl::StatusOr<SparkrtEvent> create_event() override { return refuse(); }
  absl::Status destroy_event(SparkrtEvent) override { return refuse(); }
  absl::Status record_event(SparkrtEvent, SparkrtStream) override { return refuse(); }
  absl::Status synchronize_event(SparkrtEvent) override { return refuse(); }
  absl::Status wait_event(SparkrtStream, SparkrtEvent) override { return refuse(); }
  absl::StatusOr<float> elapsed_ms(SparkrtEvent, SparkrtEvent) override { return refuse(); }
  absl::Status launch(const sdk::Launch&) override { return refuse(); }

 protected:
  absl::Status refuse() const { return absl::UnimplementedError(why_); }

 private:
  std::string name_;
  std::string why_;
};

}  // namespace sparkrt::testing

#endif  // SPARKRT_TESTS_PLUGINS_REFUSING_DEVICE_H_
