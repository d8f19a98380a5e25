// Shared helpers of the op tests: devices, device buffers that free
// themselves, random bf16 data that is never zero, and float64 views of the
// stored formats.
#ifndef SPARKRT_TESTS_OPS_OPS_TEST_SUPPORT_H_
#define SPARKRT_TESTS_OPS_OPS_TEST_SUPPORT_H_

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "sparkrt/numeric.h"
#include "sparkrt/ops/kv_cache.h"
#include "sparkrt/ops/paged_attention.h"
#include "sparkrt/sparkrt.h"
#include "status_checks.h"

namespace opstest {

using sparkrt::numeric::bf16_bits;
using sparkrt::numeric::fp8_bits;
using sparkrt::testing::contains;
using sparkrt::testing::fresh_seed;

inline std::unique_ptr<sparkrt::Device> open_device(const std::string& backend) {
  auto dev = sparkrt::Device::open({.backend = backend});
  REQUIRE_MESSAGE(dev.ok(), dev.status().ToString());
  return *std::move(dev);
}

// The resolved kernels of one module (KvCacheKernels, PagedAttentionKernels).
template <typename Kernels>
Kernels resolve(sparkrt::Device& dev) {
  auto k = Kernels::resolve(dev);
  REQUIRE_MESSAGE(k.ok(), k.status().ToString());
  return *k;
}

// Device memory freed at scope exit.
class Buffer {
 public:
  Buffer(sparkrt::Device& dev, size_t bytes) : dev_(&dev), bytes_(bytes) {
    auto p = dev.alloc(bytes == 0 ? 1 : bytes);
    REQUIRE_MESSAGE(p.ok(), p.status().ToString());
    ptr_ = *p;
  }
  template <typename T>
  Buffer(sparkrt::Device& dev, const std::vector<T>& host) : Buffer(dev, host.size() * sizeof(T)) {
    upload(host);
  }
  ~Buffer() {
    if (dev_ != nullptr) dev_->free(ptr_).IgnoreError();
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  Buffer(Buffer&& o) noexcept : dev_(o.dev_), ptr_(o.ptr_), bytes_(o.bytes_) { o.dev_ = nullptr; }

  sparkrt::DevicePtr ptr() const { return ptr_; }
  operator sparkrt::DevicePtr() const { return ptr_; }
  size_t bytes() const { return bytes_; }

  template <typename T>
  void upload(const std::vector<T>& host) {
    REQUIRE(host.size() * sizeof(T) <= bytes_);
    if (!host.empty()) REQUIRE_OK(dev_->copy_h2d(host, ptr_));
  }
  template <typename T>
  std::vector<T> download() const {
    std::vector<T> host(bytes_ / sizeof(T));
    if (!host.empty()) REQUIRE_OK(dev_->copy_d2h(ptr_, host));
    return host;
  }
  // Fills every byte with `byte` (0xff: bf16 NaN 0xffff, fp8 NaN 0xff).
  void poison(uint8_t byte = 0xff) { REQUIRE_OK(dev_->memset(ptr_, byte, bytes_)); }

 private:
  sparkrt::Device* dev_;
  sparkrt::DevicePtr ptr_;
  size_t bytes_;
};

// Values in ±[lo, hi], random sign, never zero, as bf16.
inline std::vector<bf16_bits> random_bf16(std::mt19937_64& gen, size_t n, float lo = 0.25f,
                                          float hi = 2.0f) {
  std::uniform_real_distribution<float> mag(lo, hi);
  std::bernoulli_distribution neg(0.5);
  std::vector<bf16_bits> v(n);
  for (auto& x : v) x = sparkrt::numeric::f32_to_bf16(neg(gen) ? -mag(gen) : mag(gen));
  return v;
}

inline double bf16_value(bf16_bits b) { return sparkrt::numeric::bf16_to_f32(b); }
inline double fp8_value(fp8_bits b) { return sparkrt::numeric::fp8_e4m3_to_f32(b); }

// The spacing of e4m3 values around |x| (subnormals: 2^-9).
inline double fp8_ulp(double x) {
  const double a = std::fabs(x);
  if (a < std::ldexp(1.0, -6)) return std::ldexp(1.0, -9);
  return std::ldexp(1.0, static_cast<int>(std::floor(std::log2(a))) - 3);
}

// A random permutation of block ids [0, n), so tables are not contiguous.
inline std::vector<int32_t> shuffled_blocks(std::mt19937_64& gen, int32_t n) {
  std::vector<int32_t> ids(n);
  for (int32_t i = 0; i < n; ++i) ids[i] = i;
  std::shuffle(ids.begin(), ids.end(), gen);
  return ids;
}

}  // namespace opstest

#endif  // SPARKRT_TESTS_OPS_OPS_TEST_SUPPORT_H_
