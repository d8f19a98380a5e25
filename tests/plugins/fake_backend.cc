// A minimal working backend for selection tests: one device that reports
// its name and refuses everything else. Built twice: "fakegpu" (one device)
// and "nodevice" (device_count fails, as a backend without hardware does).
#include "refusing_device.h"

namespace {

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
    return std::make_unique<sparkrt::testing::RefusingDevice>("fake test device",
                                                              "the fake test backend only opens");
  }
};

}  // namespace

SPARKRT_DEFINE_PLUGIN(FakeBackend, FAKE_NAME, "1.0.0")
