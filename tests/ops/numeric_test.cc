// The host number formats (sparkrt/numeric.h) against oracles
// written here from the definitions: the nearest representable value found
// by search in float64, ties to the even code, saturation for fp8.
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "ops_test_support.h"

using namespace opstest;
using namespace sparkrt::numeric;

namespace {

// A bf16 code's value for rounding purposes: infinity counts as 2^128, where
// an unbounded exponent would put the next value, as IEEE rounding does.
double bf16_rounding_value(uint16_t code) {
  if ((code & 0x7fff) == 0x7f80) return std::copysign(std::ldexp(1.0, 128), code & 0x8000 ? -1 : 1);
  return std::bit_cast<float>(uint32_t{code} << 16);
}

// Nearest bf16 of a finite or infinite f32 by comparing the two candidates.
uint16_t oracle_bf16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffff) >= 0x7f800000) return static_cast<uint16_t>(u >> 16);  // ±inf
  const uint16_t lo = static_cast<uint16_t>(u >> 16);  // toward zero
  const uint16_t hi = static_cast<uint16_t>(lo + 1);   // away from zero
  const double x = f;
  const double dlo = std::fabs(x - bf16_rounding_value(lo));
  const double dhi = std::fabs(bf16_rounding_value(hi) - x);
  if (dlo < dhi) return lo;
  if (dhi < dlo) return hi;
  return (lo & 1) == 0 ? lo : hi;
}

// The 127 finite non-negative e4m3 values by code, built from the format's
// definition (bias 7, 3 mantissa bits, subnormals below 2^-6).
std::vector<double> e4m3_positive_values() {
  std::vector<double> v;
  for (int code = 0; code <= 0x7e; ++code) {
    const int e = code >> 3, m = code & 7;
    v.push_back(e == 0 ? m * std::ldexp(1.0, -9) : (1.0 + m / 8.0) * std::ldexp(1.0, e - 7));
  }
  return v;
}

uint8_t oracle_fp8(float f, const std::vector<double>& values) {
  if (std::isnan(f)) return 0x7f;
  const uint8_t sign = std::signbit(f) ? 0x80 : 0;
  const double a = std::fabs(static_cast<double>(f));
  int best = 0;
  for (int code = 1; code <= 0x7e; ++code) {
    const double d = std::fabs(values[code] - a), db = std::fabs(values[best] - a);
    if (d < db || (d == db && (code & 1) == 0)) best = code;
  }
  // Past the largest value the nearest is 448 anyway: that is saturation.
  return sign | static_cast<uint8_t>(best);
}

}  // namespace

TEST_CASE("bf16 decode is the upper half of an f32") {
  for (uint32_t code = 0; code < 0x10000; ++code) {
    const float f = bf16_to_f32(static_cast<bf16_bits>(code));
    CHECK(std::bit_cast<uint32_t>(f) == code << 16);
  }
}

TEST_CASE("bf16 encode rounds to nearest even like __float2bfloat16_rn") {
  const uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  std::mt19937_64 gen(seed);
  // Every upper half with the lower halves that decide rounding: exact,
  // just above/below the midpoint, the midpoint itself, and random.
  const uint32_t fixed_lows[] = {0x0000, 0x0001, 0x7fff, 0x8000, 0x8001, 0xffff};
  uint64_t mismatches = 0;
  for (uint32_t hi = 0; hi < 0x10000; ++hi) {
    if ((hi & 0x7f80) == 0x7f80 && (hi & 0x7f) != 0) continue;  // NaN: below
    for (int k = 0; k < 8; ++k) {
      const uint32_t low = k < 6 ? fixed_lows[k] : static_cast<uint32_t>(gen() & 0xffff);
      const uint32_t u = (hi << 16) | low;
      const float f = std::bit_cast<float>(u);
      if (std::isnan(f)) continue;
      if (f32_to_bf16(f) != oracle_bf16(f) && mismatches++ < 8)
        FAIL_CHECK("f32 bits ", u, ": got ", f32_to_bf16(f), ", nearest even is ", oracle_bf16(f));
    }
  }
  CHECK(mismatches == 0);
  CHECK(f32_to_bf16(std::numeric_limits<float>::max()) == 0x7f80);  // past the largest bf16
  CHECK(f32_to_bf16(-0.0f) == 0x8000);
  CHECK(f32_to_bf16(std::nanf("")) == kBf16CanonicalNan);
  CHECK(f32_to_bf16(-std::nanf("")) == kBf16CanonicalNan);
  CHECK(std::isnan(bf16_to_f32(f32_to_bf16(std::bit_cast<float>(0x7f800001u)))));  // not inf
}

TEST_CASE("fp8 e4m3fn decode follows the format definition") {
  const std::vector<double> values = e4m3_positive_values();
  for (int code = 0; code < 256; ++code) {
    const float f = fp8_e4m3_to_f32(static_cast<fp8_bits>(code));
    if ((code & 0x7f) == 0x7f) {
      CHECK(std::isnan(f));
      continue;
    }
    const double expected = (code & 0x80 ? -1.0 : 1.0) * values[code & 0x7f];
    CHECK(static_cast<double>(f) == expected);
    CHECK(std::signbit(f) == ((code & 0x80) != 0));
  }
  CHECK(fp8_e4m3_to_f32(0x7e) == 448.0f);
  CHECK(fp8_e4m3_to_f32(0x38) == 1.0f);
  CHECK(fp8_e4m3_to_f32(0x01) == std::ldexp(1.0f, -9));
}

TEST_CASE("fp8 e4m3fn encode is nearest even with saturation") {
  const std::vector<double> values = e4m3_positive_values();
  const uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  std::mt19937_64 gen(seed);
  std::vector<float> inputs;
  // Every value, every midpoint between neighbours, and one f32 ulp either side.
  for (int code = 0; code <= 0x7e; ++code) {
    const float v = static_cast<float>(values[code]);
    inputs.push_back(v);
    if (code < 0x7e) {
      const float mid = static_cast<float>((values[code] + values[code + 1]) / 2);
      inputs.push_back(mid);
      inputs.push_back(std::nextafter(mid, 0.0f));
      inputs.push_back(std::nextafter(mid, 1e9f));
    }
  }
  // Beyond the range, below the smallest subnormal, and random magnitudes.
  for (float f : {448.5f, 463.9f, 464.0f, 480.0f, 1e6f, 3e38f, INFINITY, std::ldexp(1.0f, -10),
                  std::nextafter(std::ldexp(1.0f, -10), 1.0f), std::ldexp(1.0f, -11), 1e-30f})
    inputs.push_back(f);
  std::uniform_real_distribution<float> exponent(-14.0f, 10.0f);
  for (int i = 0; i < 20000; ++i) inputs.push_back(std::exp2(exponent(gen)));
  uint64_t mismatches = 0;
  for (float mag : inputs) {
    for (float f : {mag, -mag}) {
      if (f32_to_fp8_e4m3(f) != oracle_fp8(f, values) && mismatches++ < 8)
        FAIL_CHECK("x = ", f, ": got ", int(f32_to_fp8_e4m3(f)), ", nearest even is ",
                   int(oracle_fp8(f, values)));
    }
  }
  CHECK(mismatches == 0);
  CHECK(f32_to_fp8_e4m3(INFINITY) == 0x7e);
  CHECK(f32_to_fp8_e4m3(-INFINITY) == 0xfe);
  CHECK(f32_to_fp8_e4m3(std::nanf("")) == kFp8E4m3Nan);
  CHECK(f32_to_fp8_e4m3(-std::nanf("")) == kFp8E4m3Nan);
  CHECK(f32_to_fp8_e4m3(-0.0f) == 0x80);
}

TEST_CASE("fp4 e2m1 decode follows the format definition") {
  // Sign bit 3, exponent bits 2..1 (bias 1), mantissa bit 0; exponent 0 is
  // subnormal (0 or 0.5).
  for (uint8_t code = 0; code < 16; ++code) {
    const int e = (code >> 1) & 3, m = code & 1;
    const double mag = e == 0 ? 0.5 * m : std::ldexp(1.0 + 0.5 * m, e - 1);
    CHECK(double(e2m1_to_f32(code)) == ((code & 8) ? -mag : mag));
    // The high bits are ignored.
    CHECK(e2m1_to_f32(static_cast<uint8_t>(code | 0xf0)) == e2m1_to_f32(code));
  }
}
