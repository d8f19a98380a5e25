// Helpers of the MLA and K3 MLA decode tests: a mock device with its
// inspector and a stream, the launch a contract expects, and the number
// formats of the MLA caches as float64.
#ifndef SPARKRT_TESTS_OPS_MLA_TEST_SUPPORT_H_
#define SPARKRT_TESTS_OPS_MLA_TEST_SUPPORT_H_

#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "ops_test_support.h"
#include "sparkrt/testing/mock.h"

namespace mlatest {

template <typename Kernels>
Kernels resolve_kernels(sparkrt::Device& dev) {
  auto k = Kernels::resolve(dev);
  REQUIRE_MESSAGE(k.ok(), k.status().ToString());
  return *k;
}

// A cpu device, its resolved `Kernels` and a random generator whose seed the
// test reports with INFO.
template <typename Kernels>
struct CpuDevice {
  std::unique_ptr<sparkrt::Device> dev = opstest::open_device("cpu");
  Kernels kernels = resolve_kernels<Kernels>(*dev);
  uint64_t seed = opstest::fresh_seed();
  std::mt19937_64 gen{seed};
};

// A fresh mock device, its inspector and a stream of its own.
struct MockDevice {
  std::unique_ptr<sparkrt::Device> dev = opstest::open_device("mock");
  sparkrt::testing::MockInspector mock = attach(*dev);
  sparkrt::Stream stream = new_stream(*dev);
  std::mt19937_64 gen{opstest::fresh_seed()};

  // Distinct fake device addresses: the mock records pointers, a launch
  // never follows them.
  sparkrt::DevicePtr fake_ptr() {
    return sparkrt::DevicePtr(0x6b0000000000 + (gen() & 0xffffffff) * 256);
  }
  uint32_t u32(uint32_t lo, uint32_t hi) {
    return std::uniform_int_distribution<uint32_t>(lo, hi)(gen);
  }
  float f32(float lo, float hi) { return std::uniform_real_distribution<float>(lo, hi)(gen); }

  static sparkrt::testing::MockInspector attach(sparkrt::Device& d) {
    auto m = sparkrt::testing::MockInspector::attach(d);
    REQUIRE_MESSAGE(m.ok(), m.status().ToString());
    return *std::move(m);
  }
  static sparkrt::Stream new_stream(sparkrt::Device& d) {
    auto s = d.create_stream();
    REQUIRE_MESSAGE(s.ok(), s.status().ToString());
    return *s;
  }
};

// `got` is the launch of module.entry with this geometry, on `stream`, with
// exactly these arguments; shared memory is always 0 (every MLA kernel uses
// static shared memory only).
inline void check_launch(const sparkrt::testing::MockLaunch& got, const char* module,
                         const char* entry, sparkrt::Dim3 grid, sparkrt::Dim3 block,
                         sparkrt::Stream stream,
                         const std::vector<sparkrt::testing::MockArg>& args) {
  INFO("recorded: ", got);
  CHECK(got.module == module);
  CHECK(got.entry == entry);
  CHECK(got.grid == grid);
  CHECK(got.block == block);
  CHECK(got.shared_mem == 0);
  CHECK(got.stream == stream);
  REQUIRE(got.args.size() == args.size());
  for (size_t i = 0; i < args.size(); ++i) {
    INFO("argument #", i, ": expected ", args[i]);
    CHECK(got.args[i] == args[i]);
  }
}

// Random f32 values in ±[lo, hi], never zero.
inline std::vector<float> random_f32(std::mt19937_64& gen, size_t n, float lo = 0.25f,
                                     float hi = 2.0f) {
  std::uniform_real_distribution<float> mag(lo, hi);
  std::bernoulli_distribution neg(0.5);
  std::vector<float> v(n);
  for (float& x : v) x = neg(gen) ? -mag(gen) : mag(gen);
  return v;
}

// E2M1, written out from its definition: sign bit 3, exponent bits 2..1
// (bias 1), mantissa bit 0; exponent 0 is subnormal (0 or 0.5).
inline double e2m1_value(uint8_t nibble) {
  const int e = (nibble >> 1) & 3, m = nibble & 1;
  const double mag = e == 0 ? 0.5 * m : std::ldexp(1.0 + 0.5 * m, e - 1);
  return (nibble & 8) ? -mag : mag;
}

}  // namespace mlatest

#endif  // SPARKRT_TESTS_OPS_MLA_TEST_SUPPORT_H_
