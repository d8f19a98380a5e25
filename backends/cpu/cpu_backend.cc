// The cpu reference backend: SPARKRT_HOST_DEVICES devices (default 4) that
// run every kernel through its C++ reference implementation, and host
// collectives between them. `auto` picks it when no GPU backend has a
// device, and GPU tests use it as the oracle.
#include <atomic>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

#include "cpu_device.h"

namespace sparkrt::cpu {
namespace {

class CpuBackend final : public sdk::Backend {
 public:
  // No thread of the collectives may outlive the library.
  ~CpuBackend() override { sdk::shutdown_host_collectives(); }

  absl::StatusOr<int> device_count() override {
    auto n = sdk::host_device_count();
    if (!n.ok()) return absl::Status(n.status().code(), absl::StrCat("cpu: ", n.status().message()));
    return n;
  }
  absl::StatusOr<std::unique_ptr<sdk::Device>> open_device(int index) override {
    auto n = device_count();
    if (!n.ok()) return n.status();
    if (index < 0 || index >= *n)
      return absl::OutOfRangeError(absl::StrFormat(
          "cpu: device index %d does not exist; the cpu backend has %d devices, indices 0..%d "
          "(SPARKRT_HOST_DEVICES sets the count)",
          index, *n, *n - 1));
    return std::make_unique<CpuDevice>(serial_.fetch_add(1), index);
  }
  const void* extension(std::string_view name) override {
    if (name == SPARKRT_GRAPH_EXTENSION_NAME) return sdk::recorded_graph_extension();
    if (name == SPARKRT_COLLECTIVES_EXTENSION_NAME) return sdk::host_collectives_extension("cpu");
    return nullptr;
  }

 private:
  std::atomic<uint64_t> serial_{0};
};

}  // namespace
}  // namespace sparkrt::cpu

SPARKRT_DEFINE_PLUGIN(sparkrt::cpu::CpuBackend, "cpu", SPARKRT_VERSION)
