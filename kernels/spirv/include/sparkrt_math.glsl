// f32 functions whose GLSL built-ins Vulkan leaves too loose for the
// contracts, computed to the accuracy the CUDA kernels (and their C++
// references) get from CUDA's and the C library's:
//
//   ieee_div         a / b correctly rounded (nearest even), every input, as
//                    CUDA's `/`. Vulkan bounds `/` to 2.5 ulp only.
//   ieee_sqrt        sqrt(a) correctly rounded (nearest even), every input, as
//                    CUDA's __fsqrt_rn and sqrtf. Vulkan bounds sqrt only as
//                    1 / inversesqrt (several ulp).
//   accurate_pow     x^y for x > 0, as powf: within 1.3 ulp for |y| <= 1
//                    (RoPE's inv_freq), a few ulp beyond. Vulkan's pow is
//                    exp2(y * log2(x)), off by up to 3 + 2|y log2 x| ulp.
//   accurate_sincos  (sin x, cos x) within 1.3 ulp for every finite x, as
//                    sincosf: the range reduction is exact. Vulkan bounds sin
//                    and cos only on [-pi, pi], to 2^-11 absolute, and RoPE
//                    angles reach thousands of radians.
//
// Built from integer arithmetic and the f32 operations Vulkan rounds
// correctly (+, -, *, conversions, ldexp, roundEven), each `precise` so that
// no compiler fuses or reorders them: every device gets the same bits
// (subnormal results aside, which a device may flush).
// Needs sparkrt.glsl (64-bit integers) first.
#ifndef SPARKRT_MATH_GLSL_
#define SPARKRT_MATH_GLSL_

float ieee_div(float a, float b) {
  const uint ua = floatBitsToUint(a), ub = floatBitsToUint(b);
  const uint sign = (ua ^ ub) & 0x80000000u;
  const uint aa = ua & 0x7fffffffu, ab = ub & 0x7fffffffu;
  const uint kInf = 0x7f800000u, kNan = 0x7fc00000u;
  if (aa > kInf || ab > kInf) return uintBitsToFloat(kNan);
  if (aa == kInf) return uintBitsToFloat(ab == kInf ? kNan : sign | kInf);
  if (ab == kInf) return uintBitsToFloat(sign);
  if (ab == 0u) return uintBitsToFloat(aa == 0u ? kNan : sign | kInf);
  if (aa == 0u) return uintBitsToFloat(sign);
  // Significands as integers in [2^23, 2^24), subnormals normalized.
  uint ma = aa & 0x7fffffu, mb = ab & 0x7fffffu;
  int ea = int(aa >> 23), eb = int(ab >> 23);
  if (ea == 0) {
    const int s = 23 - findMSB(ma);
    ma <<= s;
    ea = 1 - s;
  } else {
    ma |= 0x800000u;
  }
  if (eb == 0) {
    const int s = 23 - findMSB(mb);
    mb <<= s;
    eb = 1 - s;
  } else {
    mb |= 0x800000u;
  }
  // a / b = ma / mb * 2^(ea - eb); doubling ma below mb puts ma / mb in [1, 2).
  int e = ea - eb + 127;  // the quotient's biased exponent
  if (ma < mb) {
    ma <<= 1;
    --e;
  }
  if (e >= 255) return uintBitsToFloat(sign | kInf);
  // q in [2^26, 2^27): the 24 kept bits and 3 rounding bits; the remainder
  // is the sticky bit. A subnormal quotient drops 1 - e bits more.
  const uint64_t num = uint64_t(ma) << 26;
  const uint q = uint(num / mb);
  const bool sticky = num != uint64_t(q) * mb;
  const int shift = e > 0 ? 3 : min(4 - e, 31);
  const uint kept = q >> shift, rest = q & ((1u << shift) - 1u), half_ulp = 1u << (shift - 1);
  const bool up = rest > half_ulp || (rest == half_ulp && (sticky || (kept & 1u) != 0u));
  // The encoding is monotonic: a carry out of the significand moves into the
  // exponent (the smallest normal from a subnormal, infinity from the largest).
  const uint bits = (e > 0 ? uint(e - 1) << 23 : 0u) + kept + (up ? 1u : 0u);
  return uintBitsToFloat(sign | bits);
}

// An integer square root from the built-in's estimate (a few units off),
// corrected on exact squares, then rounded on the exact remainder: for every
// input, whatever the device's sqrt.
float ieee_sqrt(float a) {
  const uint u = floatBitsToUint(a);
  if ((u & 0x7fffffffu) == 0u || u == 0x7f800000u) return a;  // +-0, +infinity
  if (u > 0x7f800000u) return uintBitsToFloat(0x7fc00000u);   // NaN, negatives
  // a = m * 2^e with m an integer in [2^23, 2^24), subnormals normalized.
  uint m = u & 0x7fffffu;
  int e = int(u >> 23);
  if (e == 0) {
    const int s = 23 - findMSB(m);
    m <<= s;
    e = 1 - s;
  } else {
    m |= 0x800000u;
  }
  e -= 150;
  // n = m * 2^sh in [2^46, 2^48) with e - sh even: sqrt(a) = sqrt(n) * 2^((e - sh) / 2),
  // sqrt(n) in [2^23, 2^24).
  const int sh = (e & 1) != 0 ? 23 : 24;
  const uint64_t n = uint64_t(m) << sh;
  // r = floor(sqrt(n)): one Newton step on the exact remainder takes the
  // estimate to within a unit, the squares settle the last one.
  int64_t r = int64_t(sqrt(float(n)));
  r += int64_t(roundEven(float(int64_t(n) - r * r) / float(2l * r)));
  while (r * r > int64_t(n)) --r;
  while ((r + 1l) * (r + 1l) <= int64_t(n)) ++r;
  // Up when n > (r + 1/2)^2 = r^2 + r + 1/4, i.e. n - r^2 > r (never a tie).
  if (int64_t(n) - r * r > r) ++r;
  return ldexp(float(r), (e - sh) / 2);  // r <= 2^24: exact, and the result is normal
}

// Dekker's exact product: a * b == hi + lo, in f32 operations only (no fma).
void two_prod(float a, float b, out float hi, out float lo) {
  precise const float p = a * b;
  precise const float ca = 4097.0 * a, cb = 4097.0 * b;  // split into 12 + 12 bits
  precise const float ah = ca - (ca - a), al = a - ah;
  precise const float bh = cb - (cb - b), bl = b - bh;
  precise const float e = ((ah * bh - p) + ah * bl + al * bh) + al * bl;
  hi = p;
  lo = e;
}

// log2(x) for finite x > 0 as hi + lo: lo holds what rounding the sum of the
// exponent and log2 of the significand drops, so the error is that of the
// significand's part alone, about 2^-24 absolute.
vec2 accurate_log2(float x) {
  uint u = floatBitsToUint(x);
  int k = 0;
  if (u < 0x800000u) {  // subnormal: normalize
    const int s = 23 - findMSB(u);
    u = (u << s) & 0x7fffffu;
    k = -126 - s;
  } else {
    k = int(u >> 23) - 127;
    u &= 0x7fffffu;
  }
  // x = m * 2^k, m in [sqrt(1/2), sqrt(2)); log(m) = 2 atanh(s), s = (m - 1) / (m + 1).
  float m = uintBitsToFloat(u | 0x3f800000u);
  if (m > 1.41421356) {
    m *= 0.5;
    ++k;
  }
  precise const float s = ieee_div(m - 1.0, m + 1.0);  // m - 1 is exact
  precise const float z = s * s;                       // <= 0.0295: the series ends at z^4
  precise const float series =
      1.0 + z * (0.33333333 + z * (0.2 + z * (0.14285714 + z * 0.11111111)));
  precise const float log2_m = s * series * 2.8853900817779268;  // 2 / ln 2
  // |log2_m| <= 1/2 <= |k| unless k == 0: the two-sum needs one subtraction.
  precise const float hi = float(k) + log2_m;
  precise const float lo = (float(k) - hi) + log2_m;
  return vec2(hi, lo);
}

// 2^(hi + lo), |lo| <= ulp(hi), within about 1 ulp (0 or infinity out of range).
float accurate_exp2(float hi, float lo) {
  hi = clamp(hi, -200.0, 200.0);
  const float n = roundEven(hi);
  precise const float f = (hi - n) + lo;  // hi - n is exact; |f| <= 1/2 + ulp
  // Taylor series of 2^f to f^7: the remainder is below 2^-26 relative.
  precise const float p =
      1.0 + f * (0.69314718 +
                 f * (0.24022651 +
                      f * (0.055504109 +
                           f * (0.0096181291 +
                                f * (0.0013333558 + f * (1.5403530e-4 + f * 1.5252734e-5))))));
  return ldexp(p, int(n));
}

// x^y for finite x > 0 (else the built-in pow): y * log2(x) is carried in
// two floats, since its rounding error, up to 2^-24 |y log2 x|, would be
// the result's relative error.
float accurate_pow(float x, float y) {
  const uint ux = floatBitsToUint(x);  // 0, negatives, infinity and NaN by their bits
  if (ux == 0u || ux >= 0x7f800000u) return pow(x, y);
  const vec2 l = accurate_log2(x);
  float t_hi, t_lo;
  two_prod(y, l.x, t_hi, t_lo);
  precise const float lo = t_lo + y * l.y;
  return accurate_exp2(t_hi, lo);
}

// 2/pi, 192 bits in 32-bit words, most significant first.
const uint kTwoOverPi[6] = uint[6](0xa2f9836eu, 0x4e441529u, 0xfc2757d1u, 0xf534ddc0u,
                                   0xdb629599u, 0x3c439041u);

// (sin x, cos x). |x| <= pi/4 goes straight to the polynomials; beyond,
// |x| = (q + r) * pi/2 with integer q and r in [-1/2, 1/2), found exactly
// from x * 2/pi in fixed point (Payne-Hanek): no angle is too large.
vec2 accurate_sincos(float x) {
  const uint ax = floatBitsToUint(x) & 0x7fffffffu;
  if (ax >= 0x7f800000u) return vec2(uintBitsToFloat(0x7fc00000u));
  if (ax < 0x39800000u) return vec2(x, 1.0);  // |x| < 2^-12: both round to these
  // The argument as hi + lo, reduced to [-pi/4, pi/4], and its quadrant.
  float a = x, a_lo = 0.0;
  uint q = 0u;
  if (ax > 0x3f490fdau) {  // |x| > pi/4
    // |x| = m * 2^(be - 158), m = the significand in the top bits of 32;
    // x * 2/pi = P * 2^(be - 350), P = m * (2/pi as a 192-bit integer).
    const int be = int(ax >> 23);
    const uint m = ((ax & 0x7fffffu) | 0x800000u) << 8;
    uint words[8];  // P, least significant word first, and a zero word above it
    uint64_t carry = 0ul;
    for (int j = 0; j < 6; ++j) {
      const uint64_t pj = uint64_t(kTwoOverPi[5 - j]) * m + carry;
      words[j] = uint(pj);
      carry = pj >> 32;
    }
    words[6] = uint(carry);
    words[7] = 0u;
    // |x| * 2/pi mod 4 in 64 bits (2 integer, 62 fraction bits) starts at
    // bit 288 - be of P; the bits above it add multiples of 4, those below
    // less than 2^(be - 318).
    const int lo = 288 - be, wi = lo >> 5, sh = lo & 31;
    uint w0 = words[wi], w1 = words[wi + 1];
    if (sh != 0) {
      w0 = (w0 >> sh) | (w1 << (32 - sh));
      w1 = (w1 >> sh) | (words[wi + 2] << (32 - sh));
    }
    // Round to the nearest quadrant: the top 2 bits of w + 2^61 are q, the
    // other 62 less 2^61 the signed remainder r * 2^62.
    const uint64_t w = ((uint64_t(w1) << 32) | uint64_t(w0)) + (1ul << 61);
    q = uint(w >> 62);
    const int64_t r = int64_t(w & ((1ul << 62) - 1ul)) - (1l << 61);
    // r * 2^-62 * pi/2 with r and pi/2 each in two floats (2^-62 is exact).
    const float scale = uintBitsToFloat(65u << 23);
    const float r_hi = float(r);
    precise const float rh = r_hi * scale, rl = float(r - int64_t(r_hi)) * scale;
    const float kPio2Hi = 1.57079637, kPio2Lo = -4.37113883e-8;
    float p_hi, p_lo;
    two_prod(rh, kPio2Hi, p_hi, p_lo);
    precise const float tail = p_lo + (rh * kPio2Lo + rl * kPio2Hi);
    a = p_hi;
    a_lo = tail;
    if ((floatBitsToUint(x) >> 31) != 0u) {  // sin is odd, cos even
      q = (4u - q) & 3u;
      a = -a;
      a_lo = -a_lo;
    }
  }
  // sin(a + a_lo) = sin a + a_lo cos a, cos(a + a_lo) = cos a - a_lo sin a,
  // to first order (a_lo <= 2^-24 |a|).
  precise const float z = a * a;
  precise const float s =
      a + (a_lo + a * z * (-0.16666655 + z * (0.0083321608 + z * -1.9515296e-4)));
  precise const float c =
      (1.0 - 0.5 * z) + (z * z * (0.041666646 + z * (-0.0013887316 + z * 2.4433157e-5)) - a * a_lo);
  switch (q) {
    case 0u: return vec2(s, c);
    case 1u: return vec2(c, -s);
    case 2u: return vec2(-s, -c);
    default: return vec2(-c, s);
  }
}

#endif  // SPARKRT_MATH_GLSL_
