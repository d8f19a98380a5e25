// The kernels of module turbo_kv_cache on SPIR-V: the TurboQuant cache
// writes (K raw bf16, V 2/3/4-bit Lloyd-Max with an FP8 E4M3 scale per 16
// values) and the normalized Walsh-Hadamard rotation (CUDA original
// kernels/ptx/turbo_kv_cache.cu; format and contracts in docs/kernels.md,
// "TurboQuant V cache" and "Module turbo_kv_cache"; the quantizer's steps in
// sparkrt/contract/turbo_kv_cache.h). The entry file declares the
// push-constant block `p` with the signature's parameters, defines
//
//   TURBO_BITS       2, 3 or 4: reshape_and_cache_flash_bf16k_turbo<bits>v
//   TURBO_HADAMARD   hadamard_transform_bf16
//
// and includes this file, which defines main().
//
// Every byte written is the reference's, bit for bit.
//
// Cache write. One workgroup per token; invocation l takes the token's
// 16-byte units l, l + n, ... (n invocations) of the K row and of the V row:
// it copies its K unit, and its V unit is half a 16-value group, so the two
// invocations of a group are the pair l, l ^ 1 of one subgroup (any subgroup
// of 2 lanes or more) and exchange by xor shuffles. The rows' loads are
// issued before the slot is known. A value is placed from y' = x * (outer /
// absmax), Vulkan's division being within 2.5 ulp: y' is within 2^-19 of the
// contract's y = x / absmax * outer (a correctly rounded quotient, one
// rounded product), so unless y' lies within kNearBound of a decision bound
// it falls on the same side of every bound as y. The few that do (and the
// groups whose absmax is outside [2^-126, 2^126)) are placed from y itself,
// through ieee_div. The sums of squares run in index order (the lane pair
// chains them): a product of two bf16 values is exact in f32, so the sum of
// the x^2 is the reference's whether or not the device fuses fma (lavapipe
// does not; values below 2^-67, whose squares round, aside). The sum of the
// centroids' squares is then an estimate where fma does not fuse, and the
// scale sqrt(x2) / sqrt(c2) comes from Vulkan's sqrt and division: an
// estimate within 2^-19 (relative) of the contract's scale, which gives its
// E4M3 code unless it lies within kNearMidpoint of a rounding midpoint. Only then (or
// for sums outside [2^-100, 2^100]) is the scale computed exactly: the
// centroids' squares summed with a correctly rounded fma on integers,
// ieee_sqrt, ieee_div.
//
// Rotation. One workgroup per (token, head) row of d values; invocation l <
// d / 8 loads elements 8l .. 8l + 7 (16 bytes) and does the butterflies of
// strides 1, 2, 4 in registers; two or three transposes through shared
// memory hand it the elements whose index bits 3-5 and then 6-8 vary, for
// the strides 8-32 and 64-256, and a last one gives it 8l .. 8l + 7 back
// for the 16-byte store. The butterflies are the reference's operations on
// the same operands in the same order of strides: the same bits.
#ifndef SPARKRT_TURBO_KV_CACHE_GLSL_
#define SPARKRT_TURBO_KV_CACHE_GLSL_

#extension GL_EXT_control_flow_attributes : require

#include "sparkrt/contract/turbo_kv_cache.glsl"

// Eight bf16 in one 16-byte access.
layout(buffer_reference, scalar, buffer_reference_align = 16) buffer U32x4Ptr { uvec4 v[]; };

// The threads of the launch's block.
const uint kThreads = gl_WorkGroupSize.x * gl_WorkGroupSize.y * gl_WorkGroupSize.z;

// The 16-byte unit at `addr` (eight bf16, element 0 lowest): one load where
// it is aligned, eight 2-byte loads where not.
uvec4 load_unit(uint64_t addr, bool aligned) {
  if (aligned) return U32x4Ptr(addr).v[0];
  U16Ptr s = U16Ptr(addr);
  uvec4 w;
  [[unroll]] for (uint j = 0u; j < 4u; ++j)
    w[j] = uint(s.v[2u * j]) | (uint(s.v[2u * j + 1u]) << 16);
  return w;
}

void store_unit(uint64_t addr, uvec4 w, bool aligned) {
  if (aligned) {
    U32x4Ptr(addr).v[0] = w;
    return;
  }
  U16Ptr d = U16Ptr(addr);
  [[unroll]] for (uint j = 0u; j < 4u; ++j) {
    d.v[2u * j] = uint16_t(w[j] & 0xffffu);
    d.v[2u * j + 1u] = uint16_t(w[j] >> 16);
  }
}

// Element i of a unit, as the bf16 code.
uint unit_code(uvec4 w, uint i) { return (w[i / 2u] >> (16u * (i % 2u))) & 0xffffu; }

#if defined(TURBO_BITS)

#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require

const uint kBits = TURBO_BITS;
const uint kCodes = 1u << kBits;
const uint kHalf = kCodes / 2u;  // centroids on each side of 0
const uint kGroup = turbo_kv_cache_kGroup;
const uint kUnit = 8u;  // values of a 16-byte unit: half a group
#if TURBO_BITS == 2
#define TURBO_CENTROID(i) turbo_kv_cache_kCentroids2[i]
#define TURBO_BOUND(j) turbo_kv_cache_kBounds2[j]
#elif TURBO_BITS == 3
#define TURBO_CENTROID(i) turbo_kv_cache_kCentroids3[i]
#define TURBO_BOUND(j) turbo_kv_cache_kBounds3[j]
#else
#define TURBO_CENTROID(i) turbo_kv_cache_kCentroids4[i]
#define TURBO_BOUND(j) turbo_kv_cache_kBounds4[j]
#endif
const float kOuter = TURBO_CENTROID(kCodes - 1u);
// Far beyond the 2^-19 that separate y' from y (|y| <= outer < 4): y'
// farther than this from a bound is on y's side of it.
const float kNearBound = 1.0 / 65536.0;
// In units of the fp8 spacing at the scale's magnitude (at least 1/16 of
// the scale): beyond the 16 * 2^-19 that separate the estimated scale from
// the contract's.
const float kNearMidpoint = 1.0 / 8192.0;

// centroid(k), k < kCodes, by constant indices (a dynamic index could put
// the table in local memory).
float centroid_of(uint k) {
  float c = TURBO_CENTROID(0);
  [[unroll]] for (uint j = 1u; j < kCodes; ++j) c = k == j ? TURBO_CENTROID(j) : c;
  return c;
}

// The contract's index of x: y = x / absmax * outer (0 when absmax is 0),
// every bound at or below y counted (nearest_index), y NaN giving 0.
uint exact_index(float x, float absmax) {
  if (floatBitsToUint(absmax) == 0u) return kHalf;  // y = 0
  const float q = ieee_div(x, absmax);
  if ((floatBitsToUint(q) & 0x7fffffffu) > 0x7f800000u) return 0u;
  precise const float y = q * kOuter;
  uint k = 0u;
  [[unroll]] for (uint j = 0u; j + 1u < kCodes; ++j) k += y >= TURBO_BOUND(j) ? 1u : 0u;
  return k;
}

// acc + c^2, correctly rounded to f32 (fma(c, c, acc)), on integers in
// units of 2^-52: every |centroid| is at least 2^-3, so c^2 is a whole
// number of units below 2^56, and a sum of 16 (below 2^7) fits 64 bits.
uint64_t fma_c2(uint64_t acc, float c) {
  const uint u = floatBitsToUint(c) & 0x7fffffffu;
  const uint64_t m = uint64_t((u & 0x7fffffu) | 0x800000u);
  const uint64_t s = acc + ((m * m) << (2 * (int(u >> 23) - 127) + 6));
  const uint hi = uint(s >> 32);
  const int msb = hi != 0u ? 32 + findMSB(hi) : findMSB(uint(s));
  if (msb <= 23) return s;
  // Keep 24 significant bits, nearest even.
  const int sh = msb - 23;
  const uint64_t unit = 1ul << sh, rest = s & (unit - 1ul), kept = s - rest;
  const bool up = rest > unit / 2ul || (rest == unit / 2ul && (kept & unit) != 0ul);
  return up ? kept + unit : kept;
}

// The contract's scale of a group (group_scale, clamped to 448): x2 its sum
// of squares, its indices in f0 (values 0-7) and f1 (8-15).
float exact_scale(float x2, uint f0, uint f1, float absmax) {
  const uint xb = floatBitsToUint(x2);
  float s;
  if (xb == 0u || xb > 0x7f800000u) {  // x2 > 0 is false
    s = ieee_div(absmax, kOuter);
  } else {
    uint64_t acc = 0ul;
    for (uint i = 0u; i < kGroup; ++i) {
      const uint f = i < kUnit ? f0 : f1;
      acc = fma_c2(acc, centroid_of(bitfieldExtract(f, int((i % kUnit) * kBits), int(kBits))));
    }
    // acc has at most 24 significant bits: the conversion is exact.
    const float c2 = float(acc) * uintBitsToFloat(75u << 23);  // 2^-52
    s = ieee_div(ieee_sqrt(x2), ieee_sqrt(c2));
  }
  // s >= 0 (no NaN): the clamp on the bits keeps infinity out of float code.
  return uintBitsToFloat(min(floatBitsToUint(s), floatBitsToUint(turbo_kv_cache_kMaxScale)));
}

// Whether s (finite, >= 0) lies within kNearMidpoint fp8 spacings of a
// rounding midpoint of f32_to_fp8_e4m3 (which saturates from 448).
bool near_fp8_midpoint(float s) {
  const int e = int(floatBitsToUint(s) >> 23) - 127;
  // s in fp8 spacings (2^-9 below 2^-6, else 2^(e - 3)): power-of-two scalings, exact.
  precise const float t = e < -6 ? s * 512.0 : s * uintBitsToFloat(uint(130 - e) << 23);
  precise const float frac = t - floor(t);
  return abs(frac - 0.5) <= kNearMidpoint;
}

// Stores the low `n` bytes of `value` at `addr` (little-endian), in the
// widest accesses its alignment allows.
void store_bytes(uint64_t addr, uint value, uint n) {
  if (n == 4u && (addr & 3ul) == 0ul) {
    U32Ptr(addr).v[0] = value;
  } else if (n >= 2u && (addr & 1ul) == 0ul) {
    U16Ptr(addr).v[0] = uint16_t(value & 0xffffu);
    if (n == 3u) U8Ptr(addr + 2ul).v[0] = uint8_t(value >> 16);
    if (n == 4u) U16Ptr(addr + 2ul).v[0] = uint16_t(value >> 16);
  } else {
    for (uint b = 0u; b < n; ++b) U8Ptr(addr + b).v[0] = uint8_t((value >> (8u * b)) & 0xffu);
  }
}

// Quantizes half h of group g from its unit w: lane h of the pair (the
// other half in the partner lane l ^ 1, which must call it too). Writes
// the half's packed indices; lane 1 writes the group's scale.
void quantize_half(uvec4 w, uint g, uint h, uint64_t data, uint64_t scales) {
  float x[kUnit];
  uint mag = 0u;  // the largest magnitude's bits; NaN is passed over, as absmax does
  [[unroll]] for (uint i = 0u; i < kUnit; ++i) {
    const uint b = unit_code(w, i);
    x[i] = bf16_to_f32(b);
    const uint a = b & 0x7fffu;
    mag = a > 0x7f80u ? mag : max(mag, a);
  }
  mag = max(mag, subgroupShuffleXor(mag, 1u));
  const float absmax = bf16_to_f32(mag);
  // 1 / absmax and y' are normal (or tiny y') for absmax in [2^-126, 2^126).
  const bool safe = mag >= 0x80u && mag < 0x7e80u;
  const float rs = kOuter / absmax;

  // Each value's index from y', its |centroid| (for c2), and which values
  // need y itself.
  uint field = 0u, exact = 0u;
  float cabs[kUnit];
  [[unroll]] for (uint i = 0u; i < kUnit; ++i) {
    const float y = x[i] * rs;
    const float a = abs(y);
    // The positive bounds that a passes by more than kNearBound, and the
    // first it does not pass (less kNearBound; beyond any a past the last).
    uint above = 0u;
    float c = TURBO_CENTROID(kHalf), next = TURBO_BOUND(kHalf) - kNearBound;
    [[unroll]] for (uint j = 0u; j + 1u < kHalf; ++j) {
      const bool past = a > TURBO_BOUND(kHalf + j) + kNearBound;
      above += past ? 1u : 0u;
      c = past ? TURBO_CENTROID(kHalf + j + 1u) : c;
      // (the index clamped: both sides of ?: may be evaluated)
      const float after = TURBO_BOUND(kHalf + min(j + 1u, kHalf - 2u)) - kNearBound;
      next = past ? (j + 2u < kHalf ? after : 4.0) : next;
    }
    // Not NaN (a > ...), clear of the bound 0, of the bounds passed (by
    // construction) and of the next (the others are farther).
    const bool sure = safe && a > kNearBound && a < next;
    const uint k = (floatBitsToUint(y) >> 31) != 0u ? kHalf - 1u - above : kHalf + above;
    field |= k << (i * kBits);
    cabs[i] = c;
    exact |= sure ? 0u : 1u << i;
  }
  // Rare: the values near a bound (or all, for an unsafe absmax).
  while (exact != 0u) {
    const uint i = uint(findLSB(exact));
    exact &= exact - 1u;
    float xi = x[0];
    [[unroll]] for (uint j = 1u; j < kUnit; ++j) xi = i == j ? x[j] : xi;
    const uint k = exact_index(xi, absmax);
    field = bitfieldInsert(field, k, int(i * kBits), int(kBits));
    const float c = abs(centroid_of(k));
    [[unroll]] for (uint j = 0u; j < kUnit; ++j) cabs[j] = i == j ? c : cabs[j];
  }
  store_bytes(data + uint64_t(g * 2u * kBits + h * kBits), field, kBits);

  // The sums of squares in index order: lane 0's eight, then lane 1 goes on.
  precise float x2 = 0.0, c2 = 0.0;
  [[unroll]] for (uint i = 0u; i < kUnit; ++i) {
    x2 = fma(x[i], x[i], x2);
    c2 = fma(cabs[i], cabs[i], c2);
  }
  const float x2_0 = subgroupShuffleXor(x2, 1u), c2_0 = subgroupShuffleXor(c2, 1u);
  const uint field_0 = subgroupShuffleXor(field, 1u);
  if (h == 0u) return;
  x2 = x2_0;
  c2 = c2_0;
  [[unroll]] for (uint i = 0u; i < kUnit; ++i) {
    x2 = fma(x[i], x[i], x2);
    c2 = fma(cabs[i], cabs[i], c2);
  }
  // x2 in [2^-100, 2^100]: the estimate is finite and normal.
  const uint xb = floatBitsToUint(x2);
  bool sure = xb >= (27u << 23) && xb <= (227u << 23);
  float s = min(sqrt(x2 / c2), turbo_kv_cache_kMaxScale);
  sure = sure && !near_fp8_midpoint(s);
  if (!sure) s = exact_scale(x2, field_0, field, absmax);
  U8Ptr(scales + g).v[0] = uint8_t(f32_to_fp8_e4m3(s));
}

// The slot's block and offset; a 32-bit division where it fits (a 64-bit
// one is emulated on NVIDIA).
void slot_position(int64_t slot, uint block_size, out uint64_t block, out uint64_t off) {
  if (slot <= 0xffffffffl) {
    const uint s = uint(slot);
    block = uint64_t(s / block_size);
    off = uint64_t(s % block_size);
  } else {
    block = uint64_t(slot) / block_size;
    off = uint64_t(slot) % block_size;
  }
}

void main() {
  const uint head_dim = p.head_dim, block_size = p.block_size;
  // Pairs of lanes: an even block, subgroups of at least 2.
  if (head_dim == 0u || head_dim % kGroup != 0u || block_size == 0u || kThreads % 2u != 0u ||
      gl_SubgroupSize % 2u != 0u)
    return;
  // The lane's place in the workgroup, subgroup by subgroup, so that l and
  // l ^ 1 share a subgroup and are its lanes i and i ^ 1.
  const uint lane = gl_SubgroupID * gl_SubgroupSize + gl_SubgroupInvocationID;
  const uint t = blockIdx.x;
  // The slot's load is not waited for before the rows' loads are issued.
  const int64_t slot = p.slot_mapping.v[t];
  const uint row = p.num_kv_heads * head_dim;
  const uint units = row / kUnit;
  const uint64_t k_src = uint64_t(p.key) + 2ul * (uint64_t(t) * p.key_stride);
  const uint64_t v_src = uint64_t(p.value) + 2ul * (uint64_t(t) * p.value_stride);
  const bool k_src_aligned = (k_src & 15ul) == 0ul, v_src_aligned = (v_src & 15ul) == 0ul;
  for (uint base = 0u; base < units; base += kThreads) {
    const uint u = base + lane;
    const bool on = u < units;  // the same for both lanes of a pair (units is even)
    uvec4 kw = uvec4(0u), vw = uvec4(0u);
    if (on) {
      kw = load_unit(k_src + 16ul * u, k_src_aligned);
      vw = load_unit(v_src + 16ul * u, v_src_aligned);
    }
    if (slot < 0l) return;
    if (!on) continue;
    uint64_t block, off;
    slot_position(slot, block_size, block, off);
    // Row starts: K rows are row * 2 bytes (a multiple of 32) apart in a block.
    const uint64_t k_dst = uint64_t(p.k_cache) + block * p.k_block_stride_bytes + off * (2ul * row);
    store_unit(k_dst + 16ul * u, kw, (k_dst & 15ul) == 0ul);
    const uint64_t v_block = uint64_t(p.v_cache) + block * p.v_block_stride_bytes;
    const uint64_t data = v_block + off * (uint64_t(row) * kBits / 8ul);
    const uint64_t scales = v_block + p.v_data_section_bytes + off * uint64_t(row / kGroup);
    quantize_half(vw, u / 2u, u % 2u, data, scales);
  }
}

#endif  // TURBO_BITS

#if defined(TURBO_HADAMARD)

shared float turbo_row[turbo_kv_cache_kMaxRotationDim];

// The butterflies of register strides 1, 2, 4 (the first `levels` of them),
// as the reference's: x[i] = a + b, x[i + s] = a - b.
void butterflies(inout float v[8], uint levels) {
  [[unroll]] for (uint l = 0u; l < 3u; ++l) {
    if (l >= levels) break;
    const uint s = 1u << l;
    [[unroll]] for (uint r = 0u; r < 8u; ++r) {
      if ((r & s) != 0u) continue;
      precise const float a = v[r], b = v[r + s];
      v[r] = a + b;
      v[r + s] = a - b;
    }
  }
}

// The element of register r of invocation l in the stage of index bits 3-5
// (lane bits 0-2 and 6 up) and in the stage of bits 6 .. 5 + k (register
// bits from k up take index bits 0 .. 2 - k, the lane the rest).
uint stage1_index(uint l, uint r) { return (l & 7u) | (r << 3) | ((l >> 3) << 6); }
uint stage2_index(uint l, uint r, uint k) {
  return ((r & ((1u << k) - 1u)) << 6) | (r >> k) | (l << (3u - k));
}

void main() {
  const uint d = p.head_dim;
  if (d < turbo_kv_cache_kMinRotationDim || d > turbo_kv_cache_kMaxRotationDim ||
      (d & (d - 1u)) != 0u || kThreads < d / 8u)
    return;
  const uint l = gl_LocalInvocationIndex;
  const bool live = l < d / 8u;
  const uint64_t src =
      uint64_t(p.in_) + 2ul * (uint64_t(blockIdx.x) * p.in_stride + uint64_t(blockIdx.y) * d);
  const uint64_t dst =
      uint64_t(p.out_) + 2ul * (uint64_t(blockIdx.x) * p.out_stride + uint64_t(blockIdx.y) * d);
  float v[8];
  if (live) {
    const uvec4 w = load_unit(src + 16ul * l, (src & 15ul) == 0ul);
    [[unroll]] for (uint r = 0u; r < 8u; ++r) v[r] = bf16_to_f32(unit_code(w, r));
  }
  // The reference's 1.0f / sqrtf(d): 2^-m for d = 2^2m; for d = 2^(2m+1),
  // sqrtf(d) is 2^m sqrtf(2) exactly, so it is 2^-m (1.0f / sqrtf(2)), whose
  // bits are 0x3f3504f3.
  const uint log2d = uint(findMSB(d));
  const float scale = ldexp((log2d & 1u) != 0u ? uintBitsToFloat(0x3f3504f3u) : 1.0, -int(log2d / 2u));
  // The whole row is read before anything is written: in place is safe.
  if (live) {
    butterflies(v, 3u);  // strides 1, 2, 4
    [[unroll]] for (uint r = 0u; r < 8u; ++r) turbo_row[8u * l + r] = v[r];
  }
  barrier();
  if (live) {  // strides 8, 16, 32
    [[unroll]] for (uint r = 0u; r < 8u; ++r) v[r] = turbo_row[stage1_index(l, r)];
    butterflies(v, 3u);
    [[unroll]] for (uint r = 0u; r < 8u; ++r) turbo_row[stage1_index(l, r)] = v[r];
  }
  barrier();
  const uint k = log2d - 6u;  // strides 64 .. d / 2
  if (k > 0u) {
    if (live) {
      [[unroll]] for (uint r = 0u; r < 8u; ++r) v[r] = turbo_row[stage2_index(l, r, k)];
      butterflies(v, k);
      [[unroll]] for (uint r = 0u; r < 8u; ++r) turbo_row[stage2_index(l, r, k)] = v[r];
    }
    barrier();
  }
  if (live) {
    uvec4 w = uvec4(0u);
    [[unroll]] for (uint r = 0u; r < 8u; ++r) {
      precise const float y = turbo_row[8u * l + r] * scale;
      w[r / 2u] |= f32_to_bf16(y) << (16u * (r % 2u));
    }
    store_unit(dst + 16ul * l, w, (dst & 15ul) == 0ul);
  }
}

#endif  // TURBO_HADAMARD

#endif  // SPARKRT_TURBO_KV_CACHE_GLSL_
