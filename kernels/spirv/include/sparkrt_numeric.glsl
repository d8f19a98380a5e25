// The contracts' number formats in GLSL, converted exactly as
// kernels/include/sparkrt/numeric.h (and the CUDA kernels) convert them, so
// that a SPIR-V kernel and the cpu reference agree bit for bit on every
// conversion:
//
//   f32_to_bf16      nearest even; NaN -> 0x7fff
//   f32_to_fp8_e4m3  nearest even; beyond ±448 -> ±448; NaN -> 0x7f
//
// Codes travel as uint (the low 16 or 8 bits): kernels load and store them
// through the 16- and 8-bit buffer references below and do all arithmetic in
// 32 bits, so only the storage features are needed, not 16-bit arithmetic.
#ifndef SPARKRT_NUMERIC_GLSL_
#define SPARKRT_NUMERIC_GLSL_

#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_8bit_storage : require

layout(buffer_reference, scalar, buffer_reference_align = 2) buffer U16Ptr { uint16_t v[]; };
layout(buffer_reference, scalar, buffer_reference_align = 1) buffer U8Ptr { uint8_t v[]; };
layout(buffer_reference, scalar, buffer_reference_align = 4) buffer I32Ptr { int v[]; };
layout(buffer_reference, scalar, buffer_reference_align = 8) buffer I64Ptr { int64_t v[]; };

// Exact: a bf16 is the upper half of an f32.
float bf16_to_f32(uint b) { return uintBitsToFloat(b << 16); }

uint f32_to_bf16(float f) {
  const uint u = floatBitsToUint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fffu;
  // Just under half an ulp, plus one when the kept lsb is odd: ties to even;
  // a carry into the exponent rounds into the next binade (or to infinity).
  return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}

// Every one of the 256 codes; 0x7f and 0xff are NaN. Built from bits: exact.
float fp8_e4m3_to_f32(uint v) {
  const uint e = (v >> 3) & 0xfu, m = v & 7u;
  const uint sign = (v & 0x80u) << 24;
  if (e == 0xfu && m == 7u) return uintBitsToFloat(sign | 0x7fc00000u);
  if (e == 0u) return uintBitsToFloat(sign | floatBitsToUint(float(m) * (1.0 / 512.0)));
  return uintBitsToFloat(sign | ((e + 120u) << 23) | (m << 20));
}

uint f32_to_fp8_e4m3(float f) {
  // NaN by its bits: Vulkan does not promise that a float instruction,
  // isnan() included, treats a NaN as one (SignedZeroInfNanPreserve aside).
  if ((floatBitsToUint(f) & 0x7fffffffu) > 0x7f800000u) return 0x7fu;
  const uint sign = (floatBitsToUint(f) >> 24) & 0x80u;
  const float a = abs(f);
  if (a > 448.0) return sign | 0x7eu;  // saturate (infinities too)
  // a in [2^e, 2^(e+1)); scaled so one fp8 ulp is 1.0 and rounded to an
  // integer (nearest even). The scalings are powers of two: exact.
  const int e = int(floatBitsToUint(a) >> 23) - 127;
  if (e < -6) return sign | uint(roundEven(a * 512.0));  // subnormal range, ulp 2^-9
  const float q = roundEven(a * uintBitsToFloat(uint(130 - e) << 23));  // in [8, 16]
  const int code = ((e + 7) << 3) + int(q) - 8;
  return sign | uint(min(code, 0x7e));
}

#endif  // SPARKRT_NUMERIC_GLSL_
