// Main of the conformance suite: picks the backend, checks it is present on
// this machine, then runs doctest.
//
//   sparkrt_conformance --backend=mock [doctest options]
//
// Exit code 77 (CTest's SKIP_RETURN_CODE) when the backend's plugin loads but
// reports that it has no usable device here (Unavailable: no driver, no GPU).
// Any other failure to open is a failure, not a skip.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "conformance.h"

namespace sparkrt::conformance {
namespace {

std::string g_backend;

struct Unsupported {
  const char* backend;
  const char* feature;
  const char* reason;
};

// Every case a backend cannot support, with the reason. Keep it short: each
// line is a gap in what that backend promises.
constexpr Unsupported kUnsupported[] = {
    {"mock", "kernel results", "the mock records launches but does not execute kernels"},
    {"cuda", "use-after-free detection",
     "freed memory stays mapped in the driver's pool, so the driver cannot tell a stale pointer "
     "from a live one"},
};

}  // namespace

const std::string& backend_name() { return g_backend; }

const char* unsupported_reason(std::string_view feature) {
  for (const auto& u : kUnsupported)
    if (g_backend == u.backend && feature == u.feature) return u.reason;
  return nullptr;
}

std::unique_ptr<Device> open_device() {
  auto dev = Device::open({.backend = g_backend});
  REQUIRE_MESSAGE(dev.ok(), "open " << g_backend << ": " << std::string(dev.status().ToString()));
  return *std::move(dev);
}

}  // namespace sparkrt::conformance

int main(int argc, char** argv) {
  std::vector<char*> rest;
  for (int i = 0; i < argc; ++i) {
    if (std::strncmp(argv[i], "--backend=", 10) == 0) {
      sparkrt::conformance::g_backend = argv[i] + 10;
    } else {
      rest.push_back(argv[i]);
    }
  }
  bool listing = false;
  for (char* a : rest)
    if (std::strstr(a, "-list") != nullptr || std::strstr(a, "-ltc") != nullptr ||
        std::strcmp(a, "-h") == 0 || std::strstr(a, "-help") != nullptr)
      listing = true;
  if (sparkrt::conformance::g_backend.empty() && !listing) {
    std::fprintf(stderr, "usage: %s --backend=<name> [doctest options]\n", argv[0]);
    return 2;
  }
  if (!listing) {
    auto dev = sparkrt::Device::open({.backend = sparkrt::conformance::g_backend});
    if (!dev.ok()) {
      std::string message(dev.status().ToString());
      if (dev.status().code() == absl::StatusCode::kUnavailable) {
        std::printf("SKIPPED: the %s backend has no usable device on this machine: %s\n",
                    sparkrt::conformance::g_backend.c_str(), message.c_str());
        return 77;
      }
      std::fprintf(stderr, "cannot open the %s backend: %s\n",
                   sparkrt::conformance::g_backend.c_str(), message.c_str());
      return 1;
    }
    std::printf("conformance: backend %s, device %d: %s (%s), plugin %s %s\n",
                sparkrt::conformance::g_backend.c_str(), (*dev)->index(),
                (*dev)->properties().name.c_str(), (*dev)->properties().architecture.c_str(),
                (*dev)->plugin_path().c_str(), (*dev)->plugin_version().c_str());
  }
  doctest::Context context;
  context.applyCommandLine(static_cast<int>(rest.size()), rest.data());
  return context.run();
}
