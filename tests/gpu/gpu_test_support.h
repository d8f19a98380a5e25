// Shared by the op tests that run a GPU backend (cuda, or vulkan with
// --backend=vulkan) against the cpu backend's
// reference implementations: the device pair, buffers mirrored on both
// devices (BufferPair), random inputs, poisoning, and the bitwise comparison.
#ifndef SPARKRT_TESTS_GPU_GPU_TEST_SUPPORT_H_
#define SPARKRT_TESTS_GPU_GPU_TEST_SUPPORT_H_

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gpu_backend.h"
#include "sparkrt/numeric.h"
#include "sparkrt/sparkrt.h"
#include "status_checks.h"  // REQUIRE_OK, fresh_seed

namespace sparkrt::gpu_test {

using sparkrt::testing::fresh_seed;

// 0xff bytes are NaN in bf16, fp8 e4m3 and f32: an unwritten element shows.
constexpr uint8_t kPoison = 0xff;

// The value of `s`, failing the test case with its status when it has none.
template <typename T>
T require_value(absl::StatusOr<T> s) {
  REQUIRE_MESSAGE(s.ok(), std::string(s.status().ToString()));
  return *std::move(s);
}

// The two devices a test compares: side 0 is the backend under test
// (backend()), side 1 the cpu reference.
// `Side` opens its device (member `dev`) and resolves its kernels.
template <typename Side>
struct DevicePair {
  Side gpu{backend()};
  Side cpu{"cpu"};
  Side& side(int i) { return i == 0 ? gpu : cpu; }
};

// One device with one module's kernels resolved (ops::KvCacheKernels, ...).
template <typename Kernels>
struct OpSide {
  std::unique_ptr<Device> dev;
  Kernels k;

  explicit OpSide(const std::string& backend)
      : dev(require_value(Device::open({.backend = backend}))),
        k(require_value(Kernels::resolve(*dev))) {}
};

// The device pair of a module's tests, opened once per test executable.
template <typename Kernels>
DevicePair<OpSide<Kernels>>& op_pair() {
  static DevicePair<OpSide<Kernels>> p;
  return p;
}

// A buffer with the same contents on both devices of a DevicePair.
class BufferPair {
 public:
  template <typename Side>
  BufferPair(DevicePair<Side>& p, size_t bytes)
      : dev_{p.gpu.dev.get(), p.cpu.dev.get()}, bytes_(bytes == 0 ? 1 : bytes) {
    for (int i = 0; i < 2; ++i) {
      auto a = dev_[i]->alloc(bytes_);
      REQUIRE_MESSAGE(a.ok(), std::string(a.status().ToString()));
      ptr_[i] = *a;
    }
  }
  template <typename Side, typename T>
  BufferPair(DevicePair<Side>& p, const std::vector<T>& host)
      : BufferPair(p, host.size() * sizeof(T)) {
    for (int i = 0; i < 2; ++i)
      REQUIRE_OK(dev_[i]->copy_h2d(host.data(), ptr_[i], host.size() * sizeof(T)));
  }
  ~BufferPair() {
    for (int i = 0; i < 2; ++i) dev_[i]->free(ptr_[i]).IgnoreError();
  }
  BufferPair(const BufferPair&) = delete;
  BufferPair& operator=(const BufferPair&) = delete;

  DevicePtr gpu() const { return ptr_[0]; }
  DevicePtr cpu() const { return ptr_[1]; }
  DevicePtr on(int side) const { return ptr_[side]; }
  size_t bytes() const { return bytes_; }
  void poison() {
    for (int i = 0; i < 2; ++i) REQUIRE_OK(dev_[i]->memset(ptr_[i], kPoison, bytes_));
  }
  template <typename T>
  std::vector<T> read(int side) const {
    std::vector<T> h(bytes_ / sizeof(T));
    REQUIRE_OK(dev_[side]->synchronize());
    REQUIRE_OK(dev_[side]->copy_d2h(ptr_[side], h.data(), h.size() * sizeof(T)));
    return h;
  }

 private:
  Device* dev_[2];
  size_t bytes_;
  DevicePtr ptr_[2];
};

// Random inputs: magnitudes in [lo, hi] with a random sign, never zero and
// never NaN, as bf16, f32 or e4m3 codes.
inline float random_mag(std::mt19937_64& gen, float lo, float hi) {
  const float m = std::uniform_real_distribution<float>(lo, hi)(gen);
  return (gen() & 1) ? -m : m;
}
inline std::vector<numeric::bf16_bits> random_bf16(std::mt19937_64& gen, size_t n,
                                                   float lo = 0.25f, float hi = 2.0f) {
  std::vector<numeric::bf16_bits> v(n);
  for (auto& x : v) x = numeric::f32_to_bf16(random_mag(gen, lo, hi));
  return v;
}
inline std::vector<float> random_f32(std::mt19937_64& gen, size_t n, float lo = 0.25f,
                                     float hi = 2.0f) {
  std::vector<float> v(n);
  for (auto& x : v) x = random_mag(gen, lo, hi);
  return v;
}
inline std::vector<numeric::fp8_bits> random_fp8(std::mt19937_64& gen, size_t n, float lo,
                                                 float hi) {
  std::vector<numeric::fp8_bits> v(n);
  for (auto& x : v) x = numeric::f32_to_fp8_e4m3(random_mag(gen, lo, hi));
  return v;
}

// Shuffled ids [0, n) (block ids of a pool).
inline std::vector<int32_t> shuffled(std::mt19937_64& gen, int32_t n) {
  std::vector<int32_t> ids(n);
  for (int32_t i = 0; i < n; ++i) ids[i] = i;
  std::shuffle(ids.begin(), ids.end(), gen);
  return ids;
}

// num_tokens distinct slots of a pool of `blocks` blocks, about 1 in 8 negative.
inline std::vector<int64_t> random_slots(std::mt19937_64& gen, uint32_t num_tokens, uint32_t blocks,
                                  uint32_t block_size) {
  std::vector<int64_t> all(uint64_t{blocks} * block_size);
  for (size_t i = 0; i < all.size(); ++i) all[i] = int64_t(i);
  std::shuffle(all.begin(), all.end(), gen);
  std::vector<int64_t> slots(all.begin(), all.begin() + num_tokens);
  std::bernoulli_distribution skip(0.125);
  for (auto& s : slots)
    if (skip(gen)) s = -1 - int64_t(gen() % 5);
  return slots;
}

// A stored element as a double.
inline double bf16d(uint16_t b) { return numeric::bf16_to_f32(b); }
inline double fp8d(uint8_t b) { return numeric::fp8_e4m3_to_f32(b); }

// Counts of one elementwise comparison.
struct Tally {
  size_t bad = 0, compared = 0, first = 0;
  double worst = 0, first_gpu = 0, first_cpu = 0;
  void add(size_t i, double gpu, double cpu, double bound) {
    ++compared;
    const double err = std::fabs(gpu - cpu);
    if (!(err <= bound) && bad++ == 0) {
      first = i;
      first_gpu = gpu;
      first_cpu = cpu;
    }
    if (bound > 0) worst = std::max(worst, err / bound);
  }
  void mismatch(size_t i, double gpu, double cpu) {
    if (bad++ == 0) {
      first = i;
      first_gpu = gpu;
      first_cpu = cpu;
    }
  }
  void check(const std::string& what) const {
    INFO(what << ": " << bad << " bad of " << compared << " compared; first at " << first
              << " gpu " << first_gpu << " cpu " << first_cpu << "; worst error / bound "
              << worst);
    CHECK(compared > 0);
    CHECK(bad == 0);
  }
};

// Both sides of `t` hold the same elements of integer type T.
template <typename T>
void check_bitwise(const BufferPair& t, const std::string& what) {
  const auto g = t.read<T>(0), c = t.read<T>(1);
  REQUIRE(g.size() == c.size());
  size_t bad = 0, first = g.size();
  for (size_t i = 0; i < g.size(); ++i)
    if (g[i] != c[i] && bad++ == 0) first = i;
  INFO(what << ": " << bad << " of " << g.size() << " elements differ; first at " << first
            << (first < g.size() ? " gpu " + std::to_string(g[first]) + " cpu " +
                                       std::to_string(c[first])
                                 : std::string()));
  CHECK(bad == 0);
}

}  // namespace sparkrt::gpu_test

#endif  // SPARKRT_TESTS_GPU_GPU_TEST_SUPPORT_H_
