// Shared helpers of the mock backend tests.
#ifndef SPARKRT_TESTS_MOCK_MOCK_TEST_SUPPORT_H_
#define SPARKRT_TESTS_MOCK_MOCK_TEST_SUPPORT_H_

#include <doctest/doctest.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "sparkrt/sparkrt.h"
#include "sparkrt/testing/mock.h"
#include "status_checks.h"

namespace mocktest {

using sparkrt::testing::MockArg;
using sparkrt::testing::MockInspector;
using sparkrt::testing::MockLaunch;
using sparkrt::testing::contains;
using sparkrt::testing::fresh_seed;
using sparkrt::testing::random_bytes;

inline constexpr char kTwin[] = "twin_contract";
inline constexpr char kRope[] = "twin_maybe_rope_f32";
inline constexpr char kSdpa[] = "twin_sdpa_gate_f32";
inline constexpr char kKinds[] = "mock_kinds";

// Test modules live in tests/data/kernels; the runtime reads the variable at
// each module search.
inline void use_test_kernels() {
  ::setenv("SPARKRT_KERNEL_PATH", SPARKRT_TEST_DATA_DIR "/kernels", 1);
}

inline std::unique_ptr<sparkrt::Device> open_mock() {
  auto dev = sparkrt::Device::open({.backend = "mock"});
  REQUIRE_MESSAGE(dev.ok(), dev.status().ToString());
  return *std::move(dev);
}

inline MockInspector inspect(sparkrt::Device& dev) {
  auto mock = MockInspector::attach(dev);
  REQUIRE_MESSAGE(mock.ok(), mock.status().ToString());
  return *std::move(mock);
}

// Asserts the code and that the message names every one of `parts`.
inline void check_error(const absl::Status& s, absl::StatusCode code,
                        std::initializer_list<std::string_view> parts) {
  INFO(s.ToString());
  CHECK(s.code() == code);
  for (std::string_view p : parts) {
    INFO("expected in message: ", std::string(p));
    CHECK(contains(s, p));
  }
}

inline std::string hex(uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace mocktest

#endif  // SPARKRT_TESTS_MOCK_MOCK_TEST_SUPPORT_H_
