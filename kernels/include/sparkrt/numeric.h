// Host number formats of the kernel contracts (docs/kernels.md): bfloat16 and
// FP8 E4M3 (`e4m3fn`) as raw bits, converted exactly as the CUDA kernels
// convert them, so a reference and a GPU agree bit for bit on every
// conversion:
//
//   f32_to_bf16      == __float2bfloat16_rn (nearest even; NaN -> 0x7fff)
//   f32_to_fp8_e4m3  == __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3)
//                       (nearest even; beyond ±448 -> ±448; NaN -> 0x7f)
//   e2m1_to_f32      the FP4 E2M1 element of NVFP4 (decode only: the kernels
//                    read it, nothing on the host writes it)
//
// Header-only and dependency-free (C++20), installed with sparkrt as target
// sparkrt::numeric: applications convert their data with it, and the cpu
// backend's reference kernels, the tests, the benchmarks and the demo use
// the same functions.
#ifndef SPARKRT_NUMERIC_H_
#define SPARKRT_NUMERIC_H_

#include <bit>
#include <cmath>
#include <cstdint>

namespace sparkrt::numeric {

using bf16_bits = uint16_t;
using fp8_bits = uint8_t;

inline constexpr float kFp8E4m3Max = 448.0f;
inline constexpr bf16_bits kBf16CanonicalNan = 0x7fff;
inline constexpr fp8_bits kFp8E4m3Nan = 0x7f;

// Exact: a bf16 is the upper half of an f32.
inline float bf16_to_f32(bf16_bits b) { return std::bit_cast<float>(uint32_t{b} << 16); }

inline bf16_bits f32_to_bf16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return kBf16CanonicalNan;
  // Add just under half an ulp, plus one when the kept lsb is odd: ties go
  // to even, and a carry into the exponent rounds up to the next binade (or
  // to infinity) as it should.
  const uint32_t rounded = u + 0x7fffu + ((u >> 16) & 1u);
  return static_cast<bf16_bits>(rounded >> 16);
}

// Every one of the 256 codes; 0x7f and 0xff are NaN.
inline float fp8_e4m3_to_f32(fp8_bits v) {
  const float sign = (v & 0x80) ? -1.0f : 1.0f;
  const int exponent = (v >> 3) & 0xf;
  const int mantissa = v & 0x7;
  if (exponent == 0xf && mantissa == 0x7) return std::nanf("");
  if (exponent == 0) return sign * std::ldexp(static_cast<float>(mantissa), -9);  // subnormal
  return sign * std::ldexp(static_cast<float>(8 + mantissa), exponent - 10);
}

inline fp8_bits f32_to_fp8_e4m3(float f) {
  if (std::isnan(f)) return kFp8E4m3Nan;
  const fp8_bits sign = std::signbit(f) ? 0x80 : 0x00;
  const float a = std::fabs(f);
  if (a > kFp8E4m3Max) return sign | 0x7e;  // saturate (infinities too)
  // Scale so one fp8 ulp is 1.0 and round to an integer (nearest even; the
  // scaled value is below 2^24, so the f32 is exact and nearbyint is exact).
  // Codes are monotonic in the value: a mantissa that rounds up to 8 (or 16)
  // carries into the exponent field by plain addition.
  int binade = 0;
  std::frexp(a, &binade);   // a = m * 2^binade, m in [0.5, 1)
  const int e = binade - 1;  // a in [2^e, 2^(e+1))
  if (a == 0.0f || e < -6) {
    // Subnormal range, ulp 2^-9: the code is the rounded multiple of the ulp
    // (8 is the smallest normal, 0x08, by the same rule).
    const float q = std::nearbyint(std::ldexp(a, 9));
    return sign | static_cast<fp8_bits>(q);
  }
  const float q = std::nearbyint(std::ldexp(a, 3 - e));  // in [8, 16]
  const int code = ((e + 7) << 3) + static_cast<int>(q) - 8;
  return sign | static_cast<fp8_bits>(code > 0x7e ? 0x7e : code);
}

// E2M1 (the NVFP4 element) in the low 4 bits: sign, 2 exponent bits, 1
// mantissa bit; every one of the 16 codes is a number.
inline float e2m1_to_f32(uint8_t nibble) {
  static constexpr float kMagnitude[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float v = kMagnitude[nibble & 7u];
  return (nibble & 8u) ? -v : v;
}

// Round-trip helpers: the value a kernel actually stores.
inline float round_bf16(float f) { return bf16_to_f32(f32_to_bf16(f)); }
inline float round_fp8_e4m3(float f) { return fp8_e4m3_to_f32(f32_to_fp8_e4m3(f)); }

}  // namespace sparkrt::numeric

#endif  // SPARKRT_NUMERIC_H_
