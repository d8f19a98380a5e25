// The CUDA backend's registration: device count, device open, extensions.
#include <string_view>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cuda_collectives.h"
#include "cuda_device.h"
#include "cuda_graph.h"
#include "sparkrt/plugin_sdk.h"

namespace sparkrt::cuda {
namespace {

class CudaBackend final : public sdk::Backend {
 public:
  absl::StatusOr<int> device_count() override {
    auto d = load_driver();
    if (!d.ok()) return d.status();
    int count = 0;
    SPARKRT_RETURN_IF_ERROR(check((*d)->DeviceGetCount(&count), "cuDeviceGetCount"));
    if (count == 0) {
      return absl::UnavailableError(
          "no CUDA device: the driver is loaded but reports none (check CUDA_VISIBLE_DEVICES "
          "and nvidia-smi)");
    }
    return count;
  }

  absl::StatusOr<std::unique_ptr<sdk::Device>> open_device(int index) override {
    auto dev = CudaDevice::open(index);
    if (!dev.ok()) return dev.status();
    return std::unique_ptr<sdk::Device>(std::move(*dev));
  }

  const void* extension(std::string_view name) override;
};

}  // namespace
}  // namespace sparkrt::cuda

SPARKRT_DEFINE_PLUGIN(sparkrt::cuda::CudaBackend, "cuda", SPARKRT_VERSION)

namespace sparkrt::cuda {
namespace {

const void* CudaBackend::extension(std::string_view name) {
  using Adapter = sdk::detail::Adapter<CudaBackend>;
  if (name == SPARKRT_GRAPH_EXTENSION_NAME)
    return graph_extension(&Adapter::error_code, &Adapter::error_message, &Adapter::error_destroy);
  // Always offered: without NCCL its calls say what was tried.
  if (name == SPARKRT_COLLECTIVES_EXTENSION_NAME) return collectives_extension();
  return nullptr;
}

}  // namespace
}  // namespace sparkrt::cuda
