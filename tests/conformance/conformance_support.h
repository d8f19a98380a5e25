// Helpers of the conformance cases (conformance_memory_test.cc,
// conformance_launch_test.cc): random inputs with a per-run seed, buffers
// freed at scope exit, and the launches the cases share.
#ifndef SPARKRT_TESTS_CONFORMANCE_CONFORMANCE_SUPPORT_H_
#define SPARKRT_TESTS_CONFORMANCE_CONFORMANCE_SUPPORT_H_

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "conformance.h"
#include "sparkrt/extensions/graph.h"

namespace sparkrt::conformance {

// A fresh seed per run, printed with every failure so it can be replayed.
inline uint64_t seed() {
  static const uint64_t s = [] {
    std::random_device rd;
    return (uint64_t{rd()} << 32) | rd();
  }();
  return s;
}

inline std::vector<uint8_t> random_bytes(size_t n, std::mt19937_64& rng) {
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng() % 255 + 1);  // never 0
  return v;
}

inline std::vector<float> random_floats(size_t n, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> mag(0.5f, 100.f);
  std::vector<float> v(n);
  for (auto& x : v) x = (rng() & 1) ? mag(rng) : -mag(rng);
  return v;
}

// Allocation freed when the scope ends, so a failing case does not leak.
struct DeviceBuffer {
  Device* dev;
  DevicePtr ptr;
  DeviceBuffer(Device& d, size_t bytes) : dev(&d) {
    auto p = d.alloc(bytes);
    REQUIRE_OK(p);
    ptr = *p;
  }
  ~DeviceBuffer() {
    if (!ptr.is_null()) dev->free(ptr).IgnoreError();
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

struct HostBuffer {
  Device* dev;
  uint8_t* ptr = nullptr;
  size_t size;
  HostBuffer(Device& d, size_t bytes) : dev(&d), size(bytes) {
    auto p = d.alloc_host(bytes);
    REQUIRE_OK(p);
    ptr = static_cast<uint8_t*>(*p);
  }
  ~HostBuffer() {
    if (ptr != nullptr) dev->free_host(ptr).IgnoreError();
  }
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
};

inline absl::Status graph_status(const SparkrtGraphExtension* g, SparkrtError* e) {
  if (e == nullptr) return absl::OkStatus();
  const char* msg = nullptr;
  size_t size = 0;
  g->error_message(e, &msg, &size);
  absl::Status s(static_cast<absl::StatusCode>(g->error_code(e)), std::string(msg, size));
  g->error_destroy(e);
  return s;
}

// Submits vector_add_f32 over n elements.
inline absl::Status launch_vector_add(Device& dev, Kernel k, DevicePtr a, DevicePtr b, DevicePtr out,
                               uint32_t n, Stream stream = {}) {
  return KernelLaunch(dev, k)
      .grid({div_ceil(n, 256u)})
      .block({256})
      .arg(a)
      .arg(b)
      .arg(out)
      .arg(n)
      .launch(stream);
}

}  // namespace sparkrt::conformance

#endif  // SPARKRT_TESTS_CONFORMANCE_CONFORMANCE_SUPPORT_H_
