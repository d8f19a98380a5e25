// A backend whose module loads and entry resolutions can be held inside the
// plugin (see slow_backend.h): a slow JIT on demand, with exact call counts.
// Everything but modules and kernels is refused.
#include "slow_backend.h"

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>

#include "refusing_device.h"
#include "sparkrt/plugin_sdk.h"

namespace {

struct Control {
  std::mutex mu;
  std::condition_variable changed;
  bool hold = false;
  bool fail = false;
  int held = 0;  // calls waiting in a hold now
  std::map<std::string, int> loads;
  std::map<std::string, int> resolutions;
  std::map<std::string, int> in_progress;  // loads and resolutions by name
  int unloads = 0;
  int overlaps = 0;
};

Control& control() {
  static Control c;
  return c;
}

// Counts a call for the scope of a load or resolution and, for a slow* name,
// waits while the hold is on.
class Call {
 public:
  Call(std::map<std::string, int> Control::*counts, std::string_view name) : name_(name) {
    Control& c = control();
    std::unique_lock<std::mutex> lock(c.mu);
    ++(c.*counts)[name_];
    if (c.in_progress[name_]++ > 0) ++c.overlaps;
    if (!name.starts_with("slow") || !c.hold) return;
    ++c.held;
    c.changed.notify_all();
    c.changed.wait(lock, [&] { return !c.hold; });
    --c.held;
  }
  ~Call() {
    std::lock_guard<std::mutex> lock(control().mu);
    --control().in_progress[name_];
  }

 private:
  std::string name_;
};

class SlowKernel final : public sparkrt::sdk::Kernel {};

class SlowModule final : public sparkrt::sdk::Module {
 public:
  ~SlowModule() override {
    std::lock_guard<std::mutex> lock(control().mu);
    ++control().unloads;
  }
  absl::StatusOr<sparkrt::sdk::Kernel*> get_kernel(std::string_view entry,
                                                   std::span<const SparkrtParamInfo>) override {
    Call call(&Control::resolutions, entry);
    std::lock_guard<std::mutex> lock(mu_);
    return &kernels_[std::string(entry)];
  }

 private:
  std::mutex mu_;
  std::map<std::string, SlowKernel> kernels_;
};

class SlowDevice final : public sparkrt::testing::RefusingDevice {
 public:
  SlowDevice() : RefusingDevice("slow test device", "the slow test backend only loads modules") {}
  absl::StatusOr<std::unique_ptr<sparkrt::sdk::Module>> load_module(
      std::string_view name, SparkrtImageFormat, std::span<const std::byte>) override {
    Call call(&Control::loads, name);
    {
      std::lock_guard<std::mutex> lock(control().mu);
      if (control().fail && name.find("flaky") != std::string_view::npos)
        return absl::InternalError("the slow test backend was told to fail this load");
    }
    return std::make_unique<SlowModule>();
  }
};

int count_of(const std::map<std::string, int>& counts, const char* name) {
  auto it = counts.find(name);
  return it == counts.end() ? 0 : it->second;
}

const SparkrtTestSlowV1 kExtension = {
    sizeof(SparkrtTestSlowV1),
    [](int on) {
      std::lock_guard<std::mutex> lock(control().mu);
      control().hold = on != 0;
      control().changed.notify_all();
    },
    [](int count, int timeout_ms) {
      std::unique_lock<std::mutex> lock(control().mu);
      return control().changed.wait_for(lock, std::chrono::milliseconds(timeout_ms),
                                        [&] { return control().held >= count; })
                 ? 1
                 : 0;
    },
    [](int on) {
      std::lock_guard<std::mutex> lock(control().mu);
      control().fail = on != 0;
    },
    [](const char* module) {
      std::lock_guard<std::mutex> lock(control().mu);
      return count_of(control().loads, module);
    },
    [](const char* entry) {
      std::lock_guard<std::mutex> lock(control().mu);
      return count_of(control().resolutions, entry);
    },
    [] {
      std::lock_guard<std::mutex> lock(control().mu);
      return control().unloads;
    },
    [] {
      std::lock_guard<std::mutex> lock(control().mu);
      return control().overlaps;
    },
    [] {
      std::lock_guard<std::mutex> lock(control().mu);
      control().hold = control().fail = false;
      control().loads.clear();
      control().resolutions.clear();
      control().in_progress.clear();
      control().unloads = control().overlaps = 0;
      control().changed.notify_all();
    },
};

class SlowBackend final : public sparkrt::sdk::Backend {
 public:
  absl::StatusOr<int> device_count() override { return 1; }
  absl::StatusOr<std::unique_ptr<sparkrt::sdk::Device>> open_device(int) override {
    return std::make_unique<SlowDevice>();
  }
  const void* extension(std::string_view name) override {
    return name == SPARKRT_TEST_SLOW_EXTENSION ? &kExtension : nullptr;
  }
};

}  // namespace

SPARKRT_DEFINE_PLUGIN(SlowBackend, "slow", "1.0.0")
