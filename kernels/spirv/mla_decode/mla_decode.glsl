// The kernels of module mla_decode on SPIR-V: one Kimi K3 gated-NoPE MLA
// decode token in f32 (contract in docs/kernels.md, "Module mla_decode"; the
// CUDA original is kernels/ptx/mla_decode.cu). An entry file declares its
// push-constant block `p`, defines MLA_DECODE_ROPE or MLA_DECODE_SDPA,
// includes this file and defines main().
//
// RoPE. The contract computes each angle pos * theta^(-2i / rope_dim), its
// cosine and sine in f64, rounded once to f32. Vulkan does not promise f64,
// and an f32 angle is far too coarse (at position 10^5 its rounding alone
// is up to 2^-8 rad), so the angle is carried in quarter turns:
// theta^(-2i / rope_dim) * 2/pi in float-float (about 48 bits, from the f32
// operations Vulkan rounds correctly), then as a 2.62 fixed-point number
// whose 64-bit product with pos is the angle mod 4 quarter turns, exactly
// (i = 0, the angle pos itself, uses 2/pi to 62 bits). The sine and cosine
// of the reduced angle come from sparkrt_math.glsl. The results are within
// an f32 ulp or so of the f64 path's, well inside the contract's tolerance,
// for positions up to 2^22 (beyond, the 48 bits run out before f64's 53).
// The rotation is two rounded products and a rounded sum, as the reference
// computes it. A workgroup computes the (cos, sin) of its pair indices once
// into shared memory, then rotates the pairs of its heads, consecutive
// invocations on consecutive elements.
//
// SDPA: the section MLA_DECODE_SDPA below, its loop in mla_decode_sdpa.glsl.
#ifndef SPARKRT_MLA_DECODE_GLSL_
#define SPARKRT_MLA_DECODE_GLSL_

#extension GL_EXT_control_flow_attributes : require

#include "sparkrt/contract/mla_decode.glsl"
#include "sparkrt_math.glsl"

#ifdef MLA_DECODE_ROPE

// ── float-float arithmetic: x.x + x.y, |x.y| <= ulp(x.x) / 2 ────────────────

vec2 ff_two_sum(float a, float b) {
  precise const float s = a + b;
  precise const float bb = s - a;
  precise const float e = (a - (s - bb)) + (b - bb);
  return vec2(s, e);
}

// |a| >= |b| (or a == 0).
vec2 ff_fast_two_sum(float a, float b) {
  precise const float s = a + b;
  precise const float e = b - (s - a);
  return vec2(s, e);
}

vec2 ff_add(vec2 a, vec2 b) {
  const vec2 s = ff_two_sum(a.x, b.x), t = ff_two_sum(a.y, b.y);
  precise const float e = s.y + t.x;
  const vec2 u = ff_fast_two_sum(s.x, e);
  precise const float f = u.y + t.y;
  return ff_fast_two_sum(u.x, f);
}

vec2 ff_mul(vec2 a, vec2 b) {
  float p, e;
  two_prod(a.x, b.x, p, e);
  precise const float lo = e + (a.x * b.y + a.y * b.x);
  return ff_fast_two_sum(p, lo);
}

// The f32 quotients need not be correctly rounded: the remainders correct them.
vec2 ff_div(vec2 a, vec2 b) {
  const float q1 = a.x / b.x;
  vec2 r = ff_add(a, ff_mul(b, vec2(-q1, 0.0)));
  const float q2 = r.x / b.x;
  r = ff_add(r, ff_mul(b, vec2(-q2, 0.0)));
  const float q3 = r.x / b.x;
  return ff_add(ff_fast_two_sum(q1, q2), vec2(q3, 0.0));
}

vec2 ff_const(uvec2 bits) { return uintBitsToFloat(bits); }

const uvec2 kFfLog2e = uvec2(0x3fb8aa3bu, 0x32a57060u);    // 1 / ln 2
const uvec2 kFfMinusLn2 = uvec2(0xbf317218u, 0x3102e308u);
const uvec2 kFfTwoOverPi = uvec2(0x3f22f983u, 0x32dc9c88u);
// 1 / (2j + 1), j = 1 .. 10: atanh's series.
const uvec2 kFfAtanh[10] = uvec2[10](
    uvec2(0x3eaaaaabu, 0xb22aaaabu), uvec2(0x3e4ccccdu, 0xb14ccccdu),
    uvec2(0x3e124925u, 0xb1db6db7u), uvec2(0x3de38e39u, 0xb0638e39u),
    uvec2(0x3dba2e8cu, 0xb13a2e8cu), uvec2(0x3d9d89d9u, 0xb144ec4fu),
    uvec2(0x3d888889u, 0xb16eeeefu), uvec2(0x3d70f0f1u, 0xaf70f0f1u),
    uvec2(0x3d579436u, 0xafd79436u), uvec2(0x3d430c31u, 0xb073cf3du));
// 1 / j!, j = 3 .. 12: exp's series.
const uvec2 kFfExp[10] = uvec2[10](
    uvec2(0x3e2aaaabu, 0xb1aaaaabu), uvec2(0x3d2aaaabu, 0xb0aaaaabu),
    uvec2(0x3c088889u, 0xafeeeeefu), uvec2(0x3ab60b61u, 0xae13e93fu),
    uvec2(0x39500d01u, 0xac3fcbfdu), uvec2(0x37d00d01u, 0xaabfcbfdu),
    uvec2(0x3638ef1du, 0x292ad8e6u), uvec2(0x3493f27eu, 0xa808760au),
    uvec2(0x32d7322bu, 0x25fea89cu), uvec2(0x310f76c7u, 0x24ff8d89u));

// theta = 2^k * m, m in [sqrt(1/2), sqrt(2)), and log2(m) in float-float,
// for finite theta > 0; `kind` says what else theta is.
const uint kThetaFinite = 0u, kThetaInf = 1u, kThetaNan = 2u;  // kThetaNan: <= 0 or NaN
struct RopeTheta {
  uint kind;
  int k;
  vec2 log2_m;
};

RopeTheta rope_theta(float theta) {
  RopeTheta t;
  t.k = 0;
  t.log2_m = vec2(0.0);
  const uint u = floatBitsToUint(theta);
  t.kind = u == 0x7f800000u ? kThetaInf : (u == 0u || u > 0x7f800000u) ? kThetaNan : kThetaFinite;
  if (t.kind != kThetaFinite) return t;
  uint mb = u & 0x7fffffu;
  if (u < 0x800000u) {  // subnormal: normalize
    const int s = 23 - findMSB(mb);
    mb = (mb << s) & 0x7fffffu;
    t.k = -126 - s;
  } else {
    t.k = int(u >> 23) - 127;
  }
  float m = uintBitsToFloat(mb | 0x3f800000u);
  if (m > 1.41421356) {
    m *= 0.5;
    ++t.k;
  }
  // ln m = 2 atanh(s), s = (m - 1) / (m + 1), |s| <= 0.172: the series to
  // s^21 is within 2^-54. m - 1 is exact, m + 1 exact as a float-float.
  const vec2 s = ff_div(vec2(m - 1.0, 0.0), ff_two_sum(m, 1.0));
  const vec2 z = ff_mul(s, s);
  vec2 series = ff_const(kFfAtanh[9]);
  for (int j = 8; j >= 0; --j) series = ff_add(ff_const(kFfAtanh[j]), ff_mul(z, series));
  series = ff_add(vec2(1.0, 0.0), ff_mul(z, series));
  t.log2_m = ff_mul(ff_mul(s, series), ff_const(kFfLog2e) * 2.0);  // * 2 is exact
  return t;
}

// trunc(x * 2^s) mod 2^64, two's complement, for finite x: exact.
uint64_t fixed_mod64(float x, int s) {
  const uint u = floatBitsToUint(x), ax = u & 0x7fffffffu;
  if (ax == 0u || ax >= 0x7f800000u) return 0ul;
  int e = int(ax >> 23);
  uint m = ax & 0x7fffffu;
  if (e == 0)
    e = 1;
  else
    m |= 0x800000u;
  const int sh = e - 150 + s;  // |x| = m * 2^(e - 150)
  const uint64_t v =
      sh >= 64 ? 0ul : sh >= 0 ? uint64_t(m) << sh : sh > -32 ? uint64_t(m >> uint(-sh)) : 0ul;
  return (u >> 31) != 0u ? 0ul - v : v;
}

// (cos, sin) of pos * theta^(-2i / rope_dim), i < rope_dim / 2, as f32.
vec2 rope_cos_sin(in RopeTheta th, uint i, uint rope_dim, uint pos) {
  // The angle in quarter turns mod 4 as 2.62 fixed point: pos times
  // theta^(-2i / rope_dim) * 2/pi in fixed point, mod 2^64.
  uint64_t step = 0x28be60db9391054aul;  // 2/pi: i = 0 is exact for every position
  if (i != 0u) {
    if (th.kind == kThetaNan) return vec2(uintBitsToFloat(0x7fc00000u));
    if (th.kind == kThetaInf) return vec2(1.0, 0.0);
    // The exponent (2i / rope_dim) * (k + log2 m) = n1 + g: the integer part
    // of 2ik / rope_dim exactly, so that g, in (-1/2, 3/2), keeps the
    // float-float's absolute precision.
    const int64_t a = int64_t(2u * i) * th.k;
    const int64_t r = int64_t(rope_dim);
    const int64_t n1 = a >= 0l ? a / r : -((r - 1l - a) / r);
    vec2 g = ff_div(ff_add(vec2(float(a - n1 * r), 0.0), ff_mul(vec2(float(2u * i), 0.0), th.log2_m)),
                    vec2(float(rope_dim), 0.0));
    const float n2 = roundEven(g.x);
    g = ff_add(g, vec2(-n2, 0.0));  // |g| <= 1/2
    const int n = int(n1) + int(n2);
    // 2^-g = e^x, x = -g ln 2, |x| <= 0.347: the series to x^12 is within 2^-52.
    const vec2 x = ff_mul(g, ff_const(kFfMinusLn2));
    vec2 e = ff_const(kFfExp[9]);
    for (int j = 8; j >= 0; --j) e = ff_add(ff_const(kFfExp[j]), ff_mul(x, e));
    e = ff_add(vec2(0.5, 0.0), ff_mul(x, e));
    e = ff_add(vec2(1.0, 0.0), ff_mul(x, e));
    e = ff_add(vec2(1.0, 0.0), ff_mul(x, e));
    // 2^-n * e * 2/pi, about 48 bits: within 2^-26 quarter turns of the
    // angle up to position 2^22.
    const vec2 f = ff_mul(e, ff_const(kFfTwoOverPi));
    step = fixed_mod64(f.x, 62 - n) + fixed_mod64(f.y, 62 - n);
  }
  const uint64_t turns = uint64_t(pos) * step;
  // Nearest quadrant q, remainder r * 2^-62 quarter turns, |r| <= 2^61.
  const uint64_t w = turns + (1ul << 61);
  const uint q = uint(w >> 62);
  const int64_t r = int64_t(w & ((1ul << 62) - 1ul)) - (1l << 61);
  // r * 2^-62 * pi/2 as a float-float (a, a_lo), |a| <= pi/4.
  const float scale = uintBitsToFloat(65u << 23);  // 2^-62
  const float r_hi = float(r);
  precise const float rh = r_hi * scale, rl = float(r - int64_t(r_hi)) * scale;
  const float kPio2Hi = uintBitsToFloat(0x3fc90fdbu), kPio2Lo = uintBitsToFloat(0xb33bbd2eu);
  float p_hi, p_lo;
  two_prod(rh, kPio2Hi, p_hi, p_lo);
  precise const float tail = p_lo + (rh * kPio2Lo + rl * kPio2Hi);
  const vec2 a = ff_fast_two_sum(p_hi, tail);
  // sin(a + a_lo) = sin a + a_lo cos a, cos(a + a_lo) = cos a - a_lo sin a.
  const vec2 sc = accurate_sincos(a.x);
  precise const float s = sc.x + a.y * sc.y;
  precise const float c = sc.y - a.y * sc.x;
  switch (q) {
    case 0u: return vec2(c, s);
    case 1u: return vec2(-s, c);
    case 2u: return vec2(-c, -s);
    default: return vec2(s, -c);
  }
}

// (cos, sin) of up to kRopeTable consecutive pair indices.
const uint kRopeTable = 512;
shared vec2 rope_cs[kRopeTable];

// Pair (x[at], x[at + half_dim]) of the f32 row at `base` rotated by cs.
void rope_rotate(uint64_t base, uint64_t at, uint half_dim, vec2 cs) {
  F32Ptr pa = F32Ptr(base + 4ul * at), pb = F32Ptr(base + 4ul * (at + half_dim));
  const float a = pa.v[0], b = pb.v[0];
  precise const float ra = a * cs.x - b * cs.y;
  precise const float rb = b * cs.x + a * cs.y;
  pa.v[0] = ra;
  pb.v[0] = rb;
}

// Workgroup x serves heads [x * threads, (x + 1) * threads), as the CUDA
// kernel's one thread per head.
void main() {
  if (p.use_nope != 0u || p.rope_dim % 2u != 0u) return;  // NoPE: nothing changes
  const uint threads = gl_WorkGroupSize.x * gl_WorkGroupSize.y * gl_WorkGroupSize.z;
  const uint tid = gl_LocalInvocationIndex;
  const uint64_t h0 = uint64_t(gl_WorkGroupID.x) * threads;
  if (h0 >= p.heads) return;  // uniform over the workgroup: no barrier is split
  const uint nh = uint(min(uint64_t(threads), p.heads - h0));
  const uint half_dim = p.rope_dim / 2u;
  const uint64_t row = uint64_t(p.nope_dim) + p.rope_dim;
  const RopeTheta th = rope_theta(p.theta);
  for (uint i0 = 0u; i0 < half_dim; i0 += kRopeTable) {
    const uint n = min(kRopeTable, half_dim - i0);
    for (uint i = tid; i < n; i += threads) rope_cs[i] = rope_cos_sin(th, i0 + i, p.rope_dim, p.pos);
    barrier();
    for (uint e = tid; e < nh * n; e += threads) {
      const uint hh = e / n, i = e % n;
      const uint64_t at = (h0 + hh) * row + p.nope_dim + i0 + i;
      rope_rotate(uint64_t(p.q), at, half_dim, rope_cs[i]);
      rope_rotate(uint64_t(p.k), at, half_dim, rope_cs[i]);
    }
    barrier();
  }
}

#endif  // MLA_DECODE_ROPE

#ifdef MLA_DECODE_SDPA

// SDPA. The launch gives one workgroup of 32 invocations to a head, which
// walks every token: so few threads are memory-latency bound, and a
// workgroup keeps as many bytes in flight as its registers hold, up to
// kKLoads + kVLoads 16-byte loads a lane (20 KB a workgroup). It walks the
// tokens in tiles of T (16 for dq = 192, dv = 128), each tile's K and V
// chunks loaded into registers while the previous tile is used: the next
// tile's K as soon as this one's dots are taken, its V as soon as this
// one's is added, so about one memory latency a tile.
//
//   K   lane (slot j, part i) holds chunks i, i + lpr, ... of token j's row
//       (lpr lanes a token, up to kKLoads chunks a lane; T <= 32 / lpr);
//       the lpr partial dots are summed through shared memory.
//   V   a pass of up to 32 chunks (dv <= 128): tsv = 32 / chunks slots,
//       lane (slot s, chunk c) adds chunk c of tokens s, s + tsv, ... into
//       its f32 outputs, the slots merged at the end. Wider passes (up to
//       512 dims) have one slot and MD_NPV = 2 or 4 chunks a lane. Each
//       MD_NPV is one instance of mla_decode_sdpa.glsl.
//
// Every lane reads the tile's scores from shared memory and keeps the same
// online softmax (base 2: q is scaled by log2(e) / sqrt(dq)); lane j adds
// token j's weight to its share of the sum. Two barriers a tile; no
// subgroup operations. V dims beyond 512 take further passes over the
// tokens (the CUDA kernel's passes of 256). Rows that are not all 16-byte
// aligned take the same code with 4-byte chunks.

const uint kThreads = mla_decode_kSdpaThreads;
const uint kKLoads = 24;                   // K chunks a lane loads a tile
const uint kVLoads = 16;                   // V chunks a lane loads a tile
const uint kPassChunks = 4u * kThreads;    // V chunks a pass (512 dims; 128 in 4-byte chunks)
const uint kMaxQFloats = 4096;             // q is staged in shared memory up to this dq
const float kLow = -1.0e30;                // below every score, and finite

layout(buffer_reference, scalar, buffer_reference_align = 16) readonly buffer MdVec4 { vec4 v; };
layout(buffer_reference, scalar, buffer_reference_align = 4) readonly buffer MdF32 { float v; };
layout(buffer_reference, scalar, buffer_reference_align = 16) writeonly buffer MdVec4Out { vec4 v; };
layout(buffer_reference, scalar, buffer_reference_align = 4) writeonly buffer MdF32Out { float v; };

// Shared memory, about 17 KB: q scaled; the lanes' partial dots and the
// tile's scores, by tile parity (a lane may start the next tile while
// another still reads this one's); at the end the V slots' outputs and the
// lanes' shares of the sum.
shared vec4 md_q[kMaxQFloats / 4u];
shared float md_part[2][kThreads];
shared float md_score[2][kThreads];
shared vec4 md_merge[kThreads];
shared float md_l[kThreads];

// What the workgroup's head needs, fixed for the launch (addresses in bytes).
struct MdGeom {
  uint seq_len, dq;
  uint64_t q;             // q[h]
  uint64_t k, v;          // token 0's row of head h in k and in v
  uint64_t k_tok, v_tok;  // between tokens
  uint64_t g, out_;       // g[h], out[h]
  bool gate, q_staged;
  float q_scale;
};

// q chunk c, scaled.
vec4 md_q_vec4(in MdGeom gm, uint c) {
  if (gm.q_staged) return md_q[c];
  return MdVec4(gm.q + 16ul * c).v * gm.q_scale;
}
float md_q_f32(in MdGeom gm, uint c) {
  if (gm.q_staged) return md_q[c >> 2u][c & 3u];
  return MdF32(gm.q + 4ul * c).v * gm.q_scale;
}

// A lane's roles in a pass over V chunks [c0, c0 + cvp) of w floats each.
struct MdLanes {
  uint ck;          // K chunks a row
  uint lpr;         // lanes a token's K row
  uint krounds;     // rounds of kKLoads loads a row takes (1 up to 768 chunks)
  uint kj, kcl;     // K slot and part
  uint T;           // tokens a tile
  uint cvp;         // V chunks of the pass
  uint tsv;         // V slots
  uint vs, vc;      // V slot and first chunk
  bool k_lane, v_lane;
  uint64_t k_at;    // the lane's first K chunk of token 0
  uint64_t k_step;  // between its K chunks
  uint64_t v_at;    // its first V chunk of token 0
};

MdLanes md_lanes(in MdGeom gm, uint c0, uint cvp, uint w, uint npv) {
  const uint lane = gl_LocalInvocationIndex;
  MdLanes ln;
  ln.ck = gm.dq / w;
  ln.lpr = min((ln.ck + kKLoads - 1u) / kKLoads, kThreads);
  const uint per_lane = (ln.ck + ln.lpr - 1u) / ln.lpr;
  ln.krounds = (per_lane + kKLoads - 1u) / kKLoads;
  ln.kj = lane / ln.lpr;
  ln.kcl = lane % ln.lpr;
  ln.cvp = cvp;
  ln.tsv = npv == 1u ? kThreads / cvp : 1u;
  ln.vs = npv == 1u ? lane / cvp : 0u;
  ln.vc = npv == 1u ? lane % cvp : lane;
  ln.T = min(kThreads / ln.lpr, ln.tsv * (kVLoads / npv));
  ln.k_lane = ln.kj < ln.T;
  ln.v_lane = ln.vs < ln.tsv;
  ln.k_step = uint64_t(ln.lpr) * w * 4u;
  ln.k_at = gm.k + uint64_t(ln.kj) * gm.k_tok + uint64_t(ln.kcl) * w * 4u;
  ln.v_at = gm.v + uint64_t(ln.vs) * gm.v_tok + uint64_t(c0 + ln.vc) * w * 4u;
  return ln;
}

#define MD_CAT2(a, b) a##b
#define MD_CAT(a, b) MD_CAT2(a, b)

#define MD_VEC vec4
#define MD_W 4u
#define MD_PTR MdVec4
#define MD_OUT_PTR MdVec4Out
#define MD_Q md_q_vec4
#define MD_TO_VEC4(a) (a)
#define MD_FROM_VEC4(a) (a)
#define MD_NPV 1u
#define MD_SUFFIX v4n1
#include "mla_decode_sdpa.glsl"
#undef MD_NPV
#undef MD_SUFFIX
#define MD_NPV 2u
#define MD_SUFFIX v4n2
#include "mla_decode_sdpa.glsl"
#undef MD_NPV
#undef MD_SUFFIX
#define MD_NPV 4u
#define MD_SUFFIX v4n4
#include "mla_decode_sdpa.glsl"
#undef MD_NPV
#undef MD_SUFFIX
#undef MD_VEC
#undef MD_W
#undef MD_PTR
#undef MD_OUT_PTR
#undef MD_Q
#undef MD_TO_VEC4
#undef MD_FROM_VEC4

#define MD_VEC float
#define MD_W 1u
#define MD_PTR MdF32
#define MD_OUT_PTR MdF32Out
#define MD_Q md_q_f32
#define MD_TO_VEC4(a) vec4((a), 0.0, 0.0, 0.0)
#define MD_FROM_VEC4(a) (a).x
#define MD_NPV 4u
#define MD_SUFFIX f1n4
#include "mla_decode_sdpa.glsl"

void main() {
  const uint lane = gl_LocalInvocationIndex;
  const uint h = gl_WorkGroupID.x;
  // A launch outside the contract returns without writing.
  if (gl_WorkGroupSize.x * gl_WorkGroupSize.y * gl_WorkGroupSize.z != kThreads ||
      h >= p.heads || p.dq == 0u || p.dv == 0u)
    return;
  MdGeom gm;
  gm.seq_len = p.seq_len;
  gm.dq = p.dq;
  gm.gate = p.use_gate != 0u;
  gm.q = uint64_t(p.q) + 4ul * h * p.dq;
  gm.k = uint64_t(p.k) + 4ul * h * p.dq;
  gm.v = uint64_t(p.v) + 4ul * h * p.dv;
  gm.k_tok = 4ul * p.heads * p.dq;
  gm.v_tok = 4ul * p.heads * p.dv;
  gm.g = gm.gate ? uint64_t(p.g) + 4ul * h * p.dv : 0ul;
  gm.out_ = uint64_t(p.out_) + 4ul * h * p.dv;
  // 1 / sqrt(dq), then log2(e) for exp2 (the built-in sqrt's few ulp, and
  // the roundings, are far inside the tolerance).
  gm.q_scale = ieee_div(1.0, sqrt(float(p.dq))) * 1.4426950408889634;
  gm.q_staged = p.dq <= kMaxQFloats;
  if (gm.q_staged) {
    for (uint i = lane; i < p.dq; i += kThreads)
      md_q[i >> 2u][i & 3u] = MdF32(gm.q + 4ul * i).v * gm.q_scale;
  }
  barrier();
  const bool vec = p.dq % 4u == 0u && p.dv % 4u == 0u &&
                   ((gm.q | gm.k | gm.v | gm.g | gm.out_ | gm.k_tok | gm.v_tok) & 15ul) == 0ul;
  if (vec) {
    const uint cv = p.dv / 4u;
    for (uint c0 = 0u; c0 < cv; c0 += min(cv - c0, kPassChunks)) {
      const uint cvp = min(cv - c0, kPassChunks);
      if (cvp <= kThreads)
        md_decode_v4n1(gm, c0, cvp);
      else if (cvp <= 2u * kThreads)
        md_decode_v4n2(gm, c0, cvp);
      else
        md_decode_v4n4(gm, c0, cvp);
    }
  } else {
    for (uint c0 = 0u; c0 < p.dv; c0 += min(p.dv - c0, kPassChunks))
      md_decode_f1n4(gm, c0, min(p.dv - c0, kPassChunks));
  }
}

#endif  // MLA_DECODE_SDPA

#endif  // SPARKRT_MLA_DECODE_GLSL_
