// Main of the GPU tests: `--backend=NAME` (default cuda) picks the backend
// under test (gpu_test::backend()); exits 77 (CTest: skipped) when it reports
// no usable device here, so machines without one skip visibly instead of
// failing.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "gpu_backend.h"
#include "sparkrt/device.h"
#include "../support/test_environment.h"

int main(int argc, char** argv) {
  if (!sparkrt::testing::make_environment_hermetic(argc, argv)) return 2;
  bool listing = false;
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    constexpr char kBackend[] = "--backend=";
    if (std::strncmp(argv[i], kBackend, sizeof kBackend - 1) == 0) {
      sparkrt::gpu_test::backend() = argv[i] + sizeof kBackend - 1;
      continue;
    }
    if (std::strstr(argv[i], "-list") != nullptr || std::strstr(argv[i], "-ltc") != nullptr)
      listing = true;
    argv[kept++] = argv[i];
  }
  argc = kept;
  const std::string& backend = sparkrt::gpu_test::backend();
  // The test kernels live in the build tree; an explicit path (--set-env) wins.
  setenv("SPARKRT_KERNEL_PATH", SPARKRT_GPU_TEST_KERNEL_DIR, 0);
  if (!listing) {
    auto dev = sparkrt::Device::open({.backend = backend});
    if (!dev.ok()) {
      const std::string message(dev.status().ToString());
      if (dev.status().code() == absl::StatusCode::kUnavailable) {
        std::printf("SKIPPED: no usable %s device on this machine: %s\n", backend.c_str(),
                    message.c_str());
        return 77;
      }
      std::fprintf(stderr, "cannot open the %s backend: %s\n", backend.c_str(), message.c_str());
      return 1;
    }
    const auto& p = (*dev)->properties();
    std::printf("%s device %d: %s (%s, %u SMs, %.1f GiB), plugin %s\n", backend.c_str(),
                (*dev)->index(), p.name.c_str(), p.architecture.c_str(), p.multiprocessor_count,
                p.total_memory / double(1 << 30), (*dev)->plugin_path().c_str());
  }
  doctest::Context context;
  context.applyCommandLine(argc, argv);
  return context.run();
}
