// The float64 oracle (sparkrt/verify/float64.h) on cases whose answers are
// known in closed form, so the checks built on it rest on something checked,
// and the bounds' arithmetic (sparkrt/verify/tolerances.h).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <numbers>
#include <vector>

#include "sparkrt/verify/float64.h"
#include "sparkrt/verify/median.h"
#include "sparkrt/verify/tolerances.h"

namespace verify = sparkrt::verify;

TEST_CASE("verify: rms_norm makes the mean square 1 (eps 0, unit weight) and scales by weight") {
  const std::vector<double> x = {3, -4, 12, 0.5}, ones(4, 1.0), w = {2, 1, 0.5, -1};
  const auto y = verify::rms_norm(x, ones, 0);
  double ss = 0;
  for (double v : y) ss += v * v;
  CHECK(ss / 4 == doctest::Approx(1.0).epsilon(1e-15));
  const auto yw = verify::rms_norm(x, w, 0);
  for (size_t j = 0; j < x.size(); ++j) CHECK(yw[j] == doctest::Approx(y[j] * w[j]));
}

TEST_CASE("verify: rope_rotate_half turns pair (i, i + half) by pos * theta^(-2i/rotary)") {
  std::vector<double> x = {1, 2, 3, 4, 5, 6, 7};  // rotary 4 of 7 dims: 4..6 pass through
  const std::vector<double> before = x;
  const double theta = 100;
  verify::rope_rotate_half(std::span<double>(x), 4, theta, [](uint32_t i) { return i + 2.0; });
  for (uint32_t i = 0; i < 2; ++i) {
    const double a = (i + 2.0) * std::pow(theta, -2.0 * i / 4);
    CHECK(x[i] == doctest::Approx(before[i] * std::cos(a) - before[i + 2] * std::sin(a)));
    CHECK(x[i + 2] == doctest::Approx(before[i + 2] * std::cos(a) + before[i] * std::sin(a)));
  }
  for (uint32_t j = 4; j < 7; ++j) CHECK(x[j] == before[j]);
  std::vector<double> z = before;  // position 0: unchanged
  verify::rope_rotate_half(std::span<double>(z), 4, theta, [](uint32_t) { return 0.0; });
  CHECK(z == before);
}

TEST_CASE("verify: attention is a softmax-weighted mean of the values") {
  const std::vector<double> q = {1, 0};
  const std::vector<std::vector<double>> k = {{0, 1}, {std::log(3.0), 0}}, v = {{1, 10}, {5, 20}};
  const auto key = [&](uint32_t t, uint32_t j) { return k[t][j]; };
  const auto value = [&](uint32_t t, uint32_t j) { return v[t][j]; };
  // Weights 1 : 3.
  const auto o = verify::attention(q, 2, 2, 1.0, key, value);
  CHECK(o[0] == doctest::Approx((1 + 3 * 5) / 4.0));
  CHECK(o[1] == doctest::Approx((10 + 3 * 20) / 4.0));
  // One token: its value, whatever the score.
  CHECK(verify::attention(q, 1, 2, 7.0, key, value) == std::vector<double>{1, 10});
  // A sink is one more logit in the denominator: weights 1 : 3 : 4.
  const auto s = verify::attention(q, 2, 2, 1.0, key, value, std::log(4.0));
  CHECK(s[0] == doctest::Approx((1 + 3 * 5) / 8.0));
  // Nothing attended: zeros.
  CHECK(verify::attention(q, 0, 2, 1.0, key, value) == std::vector<double>{0, 0});
  CHECK(verify::attention(q, 0, 2, 1.0, key, value, 0.5) == std::vector<double>{0, 0});
}

TEST_CASE("verify: k_norm_rope is rms_norm then rope") {
  const std::vector<double> x = {0.5, -1.5, 2, 0.25}, w = {1, 1.5, 0.5, 2};
  auto want = verify::rms_norm(x, w, 1e-6);
  verify::rope_rotate_half(std::span<double>(want), 4, 1e4, [](uint32_t) { return 9.0; });
  CHECK(verify::k_norm_rope(x, w, 1e-6, 4, 1e4, [](uint32_t) { return 9.0; }) == want);
}

TEST_CASE("verify: a bound is rel * |ref| + abs * scale, and the median of timings") {
  constexpr verify::Bound b{0x1p-7, 0x1p-10, "2^-7 |ref| + 2^-10 max |V|"};
  CHECK(b(-2.0, 4.0) == 2.0 / 128 + 4.0 / 1024);
  CHECK(verify::median({}) == 0);
  CHECK(verify::median({3, 1, 2}) == 2);
  CHECK(verify::median({4, 1, 3, 2}) == 2.5);
}
