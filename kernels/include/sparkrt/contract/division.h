// Correctly rounded division of many values by one divisor, for the kernels
// whose contract divides (x / scale, x / absmax) and must match the
// reference's IEEE division bit for bit. An IEEE division is a reciprocal
// estimate, refinement steps and a range check per value; with the divisor
// fixed, its reciprocal is rounded once, and a value costs one product and
// two fused multiply-adds (Markstein's correction step):
//
//   r = RN(1 / d),  q = RN(x * r),  e = RN(x - q * d),  x / d = RN(q + e * r)
//
// For d and x within [kMinMagnitude, kMaxMagnitude] in magnitude nothing
// overflows or leaves the normal range, so the steps scale with the
// exponents (and flip with the signs): the result depends on the
// significands alone. For x with a bf16 significand (8 bits) it is the IEEE
// quotient for every such significand and every f32 significand of d
// (tests/ops/division_test.cc checks all 2^30 pairs in a case run on
// request, and every bf16 value against thousands of divisors by default).
// Elsewhere (zero, subnormal, huge or non-finite operands) divide() takes the
// IEEE division itself. C++17; compiles for the host and, under nvcc, the
// device (SPARKRT_HOST_DEVICE).
#ifndef SPARKRT_CONTRACT_DIVISION_H_
#define SPARKRT_CONTRACT_DIVISION_H_

#include "sparkrt/contract/host_device.h"

namespace sparkrt::contract {

// The magnitudes of divisor and dividend for which reciprocal_quotient() is
// the correctly rounded quotient of a bf16 dividend.
inline constexpr float kMinMagnitude = 0x1p-60f;
inline constexpr float kMaxMagnitude = 0x1p60f;

// A divisor, its reciprocal, and whether its magnitude is within
// [kMinMagnitude, kMaxMagnitude] (not zero, subnormal, huge or NaN).
struct Divisor {
  float d;
  float r;
  bool in_range;
};

// IEEE operations, kept from contraction and fast-math on the device.
SPARKRT_HOST_DEVICE inline float ieee_div(float x, float d) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(x, d);
#else
  return x / d;
#endif
}
SPARKRT_HOST_DEVICE inline float ieee_mul(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
SPARKRT_HOST_DEVICE inline float ieee_fma(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, c);
#else
  return __builtin_fmaf(a, b, c);
#endif
}
SPARKRT_HOST_DEVICE inline float magnitude(float x) {
#if defined(__CUDA_ARCH__)
  return fabsf(x);
#else
  return __builtin_fabsf(x);
#endif
}

SPARKRT_HOST_DEVICE inline Divisor make_divisor(float d) {
  const float a = magnitude(d);
  const bool in_range = (a >= kMinMagnitude) & (a <= kMaxMagnitude);  // false for NaN
  return {d, in_range ? ieee_div(1.0f, d) : 0.0f, in_range};
}

// Whether x takes the reciprocal path: divisor and x within [kMinMagnitude,
// kMaxMagnitude] in magnitude (false for NaN). The comparisons are all
// evaluated (`&`), so that checks of many values compile without branches.
SPARKRT_HOST_DEVICE inline bool reciprocal_path(const Divisor& v, float x) {
  const float a = magnitude(x);
  return v.in_range & (a >= kMinMagnitude) & (a <= kMaxMagnitude);
}

// The steps alone: x / v.d correctly rounded where reciprocal_path(v, x)
// holds; for x = 0 it is a zero of either sign.
SPARKRT_HOST_DEVICE inline float reciprocal_quotient(const Divisor& v, float x) {
  const float q = ieee_mul(x, v.r);
  const float e = ieee_fma(-q, v.d, x);
  return ieee_fma(e, v.r, q);
}

// x / v.d, bit for bit the IEEE division.
SPARKRT_HOST_DEVICE inline float divide(const Divisor& v, float x) {
  return reciprocal_path(v, x) ? reciprocal_quotient(v, x) : ieee_div(x, v.d);
}

}  // namespace sparkrt::contract

#endif  // SPARKRT_CONTRACT_DIVISION_H_
