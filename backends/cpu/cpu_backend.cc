// The cpu reference backend: one device that runs every kernel through its
// C++ reference implementation. `auto` picks it when no GPU backend has a
// device, and GPU tests use it as the oracle.
#include <atomic>

#include "cpu_device.h"

namespace sparkrt::cpu {
namespace {

class CpuBackend final : public sdk::Backend {
 public:
  absl::StatusOr<int> device_count() override { return 1; }
  absl::StatusOr<std::unique_ptr<sdk::Device>> open_device(int index) override {
    if (index != 0)
      return absl::OutOfRangeError("cpu: the cpu backend has one device, index 0");
    return std::make_unique<CpuDevice>(serial_.fetch_add(1));
  }
  const void* extension(std::string_view name) override {
    return name == SPARKRT_GRAPH_EXTENSION_NAME ? sdk::recorded_graph_extension() : nullptr;
  }

 private:
  std::atomic<uint64_t> serial_{0};
};

}  // namespace
}  // namespace sparkrt::cpu

SPARKRT_DEFINE_PLUGIN(sparkrt::cpu::CpuBackend, "cpu", SPARKRT_VERSION)
