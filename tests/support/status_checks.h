// Status assertions, seeds and random inputs shared by the test suites.
#ifndef SPARKRT_TESTS_SUPPORT_STATUS_CHECKS_H_
#define SPARKRT_TESTS_SUPPORT_STATUS_CHECKS_H_

#include <doctest/doctest.h>

#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <string_view>
#include <system_error>
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

// A fresh seed per run; tests report it with INFO so that a failure can be
// replayed: --set-env=SPARKRT_TEST_SEED=<seed> makes every fresh_seed() of
// the run return it (decimal, below 2^64; anything else fails the run).
inline uint64_t fresh_seed() {
  if (const char* text = std::getenv("SPARKRT_TEST_SEED"); text != nullptr && *text != '\0') {
    uint64_t seed = 0;
    const char* end = text + std::strlen(text);
    const auto [at, ec] = std::from_chars(text, end, seed);
    if (ec != std::errc() || at != end) {
      std::fprintf(stderr, "SPARKRT_TEST_SEED='%s' is not a decimal seed below 2^64\n", text);
      std::abort();
    }
    return seed;
  }
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
