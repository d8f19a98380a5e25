// Opens a device the way an application does (environment only) and prints
// what was chosen: "backend=<name> index=<i> device=<name>", or the error on
// stderr with exit code 1. Driven by backend_selection_test.
#include <cstdio>

#include "sparkrt/device.h"

int main() {
  auto dev = sparkrt::Device::open();
  if (!dev.ok()) {
    std::fprintf(stderr, "%s\n", dev.status().ToString().c_str());
    return 1;
  }
  std::printf("backend=%s index=%d device=%s\n", (*dev)->backend_name().c_str(), (*dev)->index(),
              (*dev)->properties().name.c_str());
  return 0;
}
