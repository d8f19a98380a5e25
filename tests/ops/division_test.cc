// sparkrt/contract/division.h on the host: contract::divide against the IEEE
// division `x / d`, bit for bit, for every bf16 dividend (the kernels divide
// bf16 values) and divisors chosen to reach every case: random bit patterns,
// random magnitudes within the reciprocal range, powers of two, all-ones and
// all-zeros significands, the range's edges, subnormals, values near
// FLT_MAX, zeros, infinities and NaN. The reciprocal steps alone are checked
// too where they apply, and on a stride through all divisor significands.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "sparkrt/contract/division.h"
#include "status_checks.h"

namespace {

namespace contract = sparkrt::contract;
using sparkrt::testing::fresh_seed;

float from_bits(uint32_t u) { return std::bit_cast<float>(u); }
uint32_t bits(float f) { return std::bit_cast<uint32_t>(f); }

// Divisors of every kind, both signs.
std::vector<float> divisors(std::mt19937_64& gen) {
  std::vector<float> d;
  auto both = [&d](float f) {
    d.push_back(f);
    d.push_back(-f);
  };
  for (int i = 0; i < 600; ++i) d.push_back(from_bits(uint32_t(gen())));  // any bits
  for (int i = 0; i < 600; ++i) {  // in range: exponents -60 .. 59, any significand
    const uint32_t e = 127 - 60 + uint32_t(gen() % 120);
    d.push_back(from_bits(uint32_t(gen() & 0x807fffffu) | e << 23));
  }
  for (int e = -149; e <= 127; ++e) both(std::ldexp(1.0f, e));  // significand all zeros
  for (int e = -126; e <= 127; e += 3) both(from_bits(uint32_t(e + 127) << 23 | 0x7fffffu));
  for (float f : {contract::kMinMagnitude, contract::kMaxMagnitude}) {
    both(f);
    both(std::nextafter(f, 0.0f));
    both(std::nextafter(f, INFINITY));
  }
  for (uint32_t sub : {0x1u, 0x2u, 0x3u, 0x400000u, 0x7fffffu, 0x123456u}) both(from_bits(sub));
  const float max = std::numeric_limits<float>::max();
  for (float f : {max, std::nextafter(max, 0.0f), max / 2, max / 3}) both(f);
  // fp8 cache scales and short fractions.
  for (float f : {0.004f, 0.0371f, 0.02f, 0.03f, 1.0f / 3, 1.5f, 3.0f, 7.0f, 0.1f, 448.0f,
                  1e-30f, 1e-38f, 3e38f})
    both(f);
  for (float f : {0.0f, INFINITY, std::numeric_limits<float>::quiet_NaN()}) both(f);
  return d;
}

}  // namespace

TEST_CASE("contract division: divide is x / d bit for bit for every bf16 x") {
  const uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  std::mt19937_64 gen(seed);
  const std::vector<float> ds = divisors(gen);
  uint64_t mismatches = 0, reciprocal = 0;
  for (float d : ds) {
    const contract::Divisor v = contract::make_divisor(d);
    const float a = std::fabs(d);
    CHECK(v.in_range == (a >= contract::kMinMagnitude && a <= contract::kMaxMagnitude));
    for (uint32_t code = 0; code < 0x10000; ++code) {
      const float x = from_bits(code << 16);
      const float ax = std::fabs(x);
      const bool fast = contract::reciprocal_path(v, x);
      if (fast != (v.in_range && ax >= contract::kMinMagnitude && ax <= contract::kMaxMagnitude) &&
          mismatches++ < 8)
        FAIL_CHECK("x bits ", code << 16, " d bits ", bits(d), ": reciprocal path ", fast);
      reciprocal += fast;
      const float got = contract::divide(v, x), want = x / d;
      if (bits(got) != bits(want) && mismatches++ < 8)
        FAIL_CHECK("x bits ", code << 16, " d bits ", bits(d), ": ", bits(got), ", x / d is ",
                   bits(want));
    }
  }
  CHECK(mismatches == 0);
  CHECK(reciprocal > ds.size() * 0x10000 / 8);  // the reciprocal path is the common one
}

// The result depends on the significands alone within the range, so a
// stride through all 2^23 divisor significands, every bf16 significand and
// both signs each, covers the steps' arithmetic broadly.
TEST_CASE("contract division: the reciprocal steps over divisor significands") {
  const uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  std::mt19937_64 gen(seed);
  const uint32_t stride = 97, start = uint32_t(gen() % stride);
  uint64_t mismatches = 0, checked = 0;
  for (uint32_t m = start; m < (1u << 23); m += stride) {
    const int e = int(gen() % 120) - 60;  // either operand's exponent, in range
    const float d = std::ldexp(from_bits(0x3f800000u | m), e);
    const contract::Divisor v = contract::make_divisor(d);
    for (uint32_t k = 0; k < 256; ++k) {
      const float x = std::ldexp(from_bits((k & 0x80u) << 24 | 0x3f800000u | (k & 0x7fu) << 16),
                                 int(gen() % 120) - 60);
      checked += contract::reciprocal_path(v, x);
      if (bits(contract::reciprocal_quotient(v, x)) != bits(x / d) && mismatches++ < 8)
        FAIL_CHECK("x bits ", bits(x), " d bits ", bits(d), ": ",
                   bits(contract::reciprocal_quotient(v, x)), ", x / d is ", bits(x / d));
    }
  }
  CHECK(checked == ((1u << 23) - start + stride - 1) / stride * 256);
  CHECK(mismatches == 0);
}

// The whole of the claim in division.h: every bf16 significand against every
// f32 significand of the divisor (2^30 pairs, seconds in an optimized build,
// minutes under the sanitizers, so not among the default cases). Run with
// `sparkrt_ops_tests --no-skip -tc='contract division: every*'`.
TEST_CASE("contract division: every bf16 significand against every divisor significand" *
          doctest::skip()) {
  uint64_t mismatches = 0;
  for (uint32_t m = 0; m < (1u << 23); ++m) {
    const float d = from_bits(0x3f800000u | m);
    const contract::Divisor v = contract::make_divisor(d);
    for (uint32_t k = 0; k < 128; ++k) {
      const float x = from_bits(0x3f800000u | k << 16);
      if (bits(contract::reciprocal_quotient(v, x)) != bits(x / d) && mismatches++ < 8)
        FAIL_CHECK("x ", x, " d bits ", bits(d), ": ", bits(contract::reciprocal_quotient(v, x)),
                   ", x / d is ", bits(x / d));
    }
  }
  CHECK(mismatches == 0);
}
