// Status assertions, seeds and random inputs shared by the test suites.
#ifndef SPARKRT_TESTS_SUPPORT_STATUS_CHECKS_H_
#define SPARKRT_TESTS_SUPPORT_STATUS_CHECKS_H_

#include <doctest/doctest.h>

#include <cstdint>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"

#define REQUIRE_OK(expr)                     \
  do {                                       \
    const absl::Status _s = (expr);          \
    REQUIRE_MESSAGE(_s.ok(), _s.ToString()); \
  } while (0)
#define CHECK_OK(expr)                     \
  do {                                     \
    const absl::Status _s = (expr);        \
    CHECK_MESSAGE(_s.ok(), _s.ToString()); \
  } while (0)

namespace sparkrt::testing {

// Whether the message of `s` has `text` in it.
inline bool contains(const absl::Status& s, std::string_view text) {
  return std::string(s.message()).find(text) != std::string::npos;
}

// A fresh seed per run; tests report it with INFO so a failure can be replayed.
inline uint64_t fresh_seed() {
  return (uint64_t{std::random_device{}()} << 32) | std::random_device{}();
}

// n random bytes, none zero (so a copy that moves nothing is caught).
inline std::vector<uint8_t> random_bytes(std::mt19937_64& gen, size_t n) {
  std::uniform_int_distribution<int> d(1, 255);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(d(gen));
  return v;
}

}  // namespace sparkrt::testing

#endif  // SPARKRT_TESTS_SUPPORT_STATUS_CHECKS_H_
