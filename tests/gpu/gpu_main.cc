// Main of the CUDA backend tests: exits 77 (CTest: skipped) when the cuda
// plugin reports no usable device here, so machines without a GPU skip
// visibly instead of failing.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "sparkrt/device.h"
#include "../support/test_environment.h"

int main(int argc, char** argv) {
  if (!sparkrt::testing::make_environment_hermetic(argc, argv)) return 2;
  bool listing = false;
  for (int i = 1; i < argc; ++i)
    if (std::strstr(argv[i], "-list") != nullptr || std::strstr(argv[i], "-ltc") != nullptr)
      listing = true;
  // The test kernels live in the build tree; an explicit path (--set-env) wins.
  setenv("SPARKRT_KERNEL_PATH", SPARKRT_GPU_TEST_KERNEL_DIR, 0);
  if (!listing) {
    auto dev = sparkrt::Device::open({.backend = "cuda"});
    if (!dev.ok()) {
      const std::string message(dev.status().ToString());
      if (dev.status().code() == absl::StatusCode::kUnavailable) {
        std::printf("SKIPPED: no usable CUDA device on this machine: %s\n", message.c_str());
        return 77;
      }
      std::fprintf(stderr, "cannot open the cuda backend: %s\n", message.c_str());
      return 1;
    }
    const auto& p = (*dev)->properties();
    std::printf("cuda device %d: %s (%s, %u SMs, %.1f GiB), plugin %s\n", (*dev)->index(),
                p.name.c_str(), p.architecture.c_str(), p.multiprocessor_count,
                p.total_memory / double(1 << 30), (*dev)->plugin_path().c_str());
  }
  doctest::Context context;
  context.applyCommandLine(argc, argv);
  return context.run();
}
