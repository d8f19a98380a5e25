// Helpers of the MLA and K3 MLA decode tests: a cpu device with its kernels,
// the mock helpers of ops_mock_support.h, and the number formats of the MLA
// caches as float64.
#ifndef SPARKRT_TESTS_OPS_MLA_TEST_SUPPORT_H_
#define SPARKRT_TESTS_OPS_MLA_TEST_SUPPORT_H_

#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "ops_mock_support.h"

namespace mlatest {

using opstest::check_launch;
using opstest::MockDevice;
using opstest::resolve_kernels;

// A cpu device, its resolved `Kernels` and a random generator whose seed the
// test reports with INFO.
template <typename Kernels>
struct CpuDevice {
  std::unique_ptr<sparkrt::Device> dev = opstest::open_device("cpu");
  Kernels kernels = resolve_kernels<Kernels>(*dev);
  uint64_t seed = opstest::fresh_seed();
  std::mt19937_64 gen{seed};
};

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
