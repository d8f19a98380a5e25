// Helpers of the op contract tests on the recording mock: a mock device with
// its inspector and a stream of its own, and the check of one recorded
// launch against what a kernel contract says.
#ifndef SPARKRT_TESTS_OPS_OPS_MOCK_SUPPORT_H_
#define SPARKRT_TESTS_OPS_OPS_MOCK_SUPPORT_H_

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <random>
#include <utility>
#include <vector>

#include "ops_test_support.h"
#include "sparkrt/testing/mock.h"

namespace opstest {

template <typename Kernels>
Kernels resolve_kernels(sparkrt::Device& dev) {
  auto k = Kernels::resolve(dev);
  REQUIRE_MESSAGE(k.ok(), k.status().ToString());
  return *k;
}

// What a GB10 (DGX Spark) reports that op geometry depends on: 48
// multiprocessors, 99 KB of shared memory per block.
inline constexpr char kGb10Properties[] =
    "multiprocessor_count=48,max_shared_memory_per_block_optin=101376";

// A fresh mock device, its inspector and a stream of its own. `properties`
// (SPARKRT_MOCK_PROPERTIES syntax) changes what the device reports; by
// default it reports an H200's multiprocessors and shared memory.
struct MockDevice {
  explicit MockDevice(const char* properties = nullptr) : dev(open_with(properties)) {}

  std::unique_ptr<sparkrt::Device> dev;
  sparkrt::testing::MockInspector mock = attach(*dev);
  sparkrt::Stream stream = new_stream(*dev);
  std::mt19937_64 gen{fresh_seed()};

  // Distinct device addresses for arguments the mock records and never
  // follows. They lie in one allocation, made at the first call, because a
  // launch on the mock must point into live memory: increasing by a random
  // number of 256-byte steps through its first half, so a workspace sliced
  // from one of them stays inside too. Host memory only where touched.
  static constexpr uint64_t kFakeArenaBytes = uint64_t{1} << 30;
  sparkrt::DevicePtr fake_ptr() {
    if (fake_arena.is_null()) {
      auto a = dev->alloc(kFakeArenaBytes);
      REQUIRE_MESSAGE(a.ok(), a.status().ToString());
      fake_arena = *a;
    }
    fake_next += 256 * (1 + gen() % 1024);
    REQUIRE(fake_next < kFakeArenaBytes / 2);
    return fake_arena + fake_next;
  }
  sparkrt::DevicePtr fake_arena;
  uint64_t fake_next = 0;
  uint32_t u32(uint32_t lo, uint32_t hi) {
    return std::uniform_int_distribution<uint32_t>(lo, hi)(gen);
  }
  float f32(float lo, float hi) { return std::uniform_real_distribution<float>(lo, hi)(gen); }

  // The one launch the op made, after checking it was the only one.
  sparkrt::testing::MockLaunch only_launch() const {
    const auto launches = mock.launches();
    REQUIRE(launches.size() == 1);
    return launches[0];
  }

  static std::unique_ptr<sparkrt::Device> open_with(const char* properties) {
    if (properties == nullptr) return open_device("mock");
    ::setenv("SPARKRT_MOCK_PROPERTIES", properties, 1);  // read at open
    auto d = open_device("mock");
    ::unsetenv("SPARKRT_MOCK_PROPERTIES");
    return d;
  }
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
// exactly these arguments; shared memory is always 0 (every kernel of these
// modules uses static shared memory only). A plain launch: the mock loads no
// cubin, and the ops launch dependent only from cubins.
inline void check_launch(const sparkrt::testing::MockLaunch& got, const char* module,
                         const char* entry, sparkrt::Dim3 grid, sparkrt::Dim3 block,
                         sparkrt::Stream stream,
                         const std::vector<sparkrt::testing::MockArg>& args,
                         uint32_t shared_mem = 0) {
  INFO("recorded: ", got);
  CHECK(got.module == module);
  CHECK(got.entry == entry);
  CHECK(got.grid == grid);
  CHECK(got.block == block);
  CHECK(got.shared_mem == shared_mem);
  CHECK(got.stream == stream);
  CHECK_FALSE(got.dependent_launch);
  REQUIRE(got.args.size() == args.size());
  for (size_t i = 0; i < args.size(); ++i) {
    INFO("argument #", i, ": expected ", args[i]);
    CHECK(got.args[i] == args[i]);
  }
}

}  // namespace opstest

#endif  // SPARKRT_TESTS_OPS_OPS_MOCK_SUPPORT_H_
