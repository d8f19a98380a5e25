// Split-KV attention of module mla_decode on SPIR-V: k3_mla_sdpa_split_f32
// and k3_mla_sdpa_combine_f32 (kernels/ptx/mla_decode.cu; partials as
// sparkrt/contract/mla_decode.h defines them). An entry file declares its
// push-constant block `p`, defines MLA_DECODE_SPLIT or MLA_DECODE_COMBINE,
// includes this file and defines main().
//
// A split's workgroup walks its tokens kStep at a time with no subgroup
// operations (their size differs between devices): invocation i loads the
// K chunks i % kLanes, i % kLanes + kLanes, ... of token i / kLanes and the
// V chunks (i % 32, i % 32 + 32) of tokens i / 32, i / 32 + 8, ...; partial
// dots meet in shared memory, the first kStep invocations sum a token's,
// and every invocation then reads the step's scores and keeps the same
// online softmax (base 2), so the running max is uniform and the
// invocations' V sums merge at the end by plain addition. Two barriers a
// step; the step's shared arrays alternate by parity so that one
// invocation may start the next step while another still reads this one.
#ifndef SPARKRT_MLA_DECODE_SPLIT_GLSL_
#define SPARKRT_MLA_DECODE_SPLIT_GLSL_

#extension GL_EXT_control_flow_attributes : require

#include "sparkrt/contract/mla_decode.glsl"
#include "sparkrt/contract/split_kv.h"

layout(buffer_reference, scalar, buffer_reference_align = 16) readonly buffer MsVec4 { vec4 v; };
layout(buffer_reference, scalar, buffer_reference_align = 4) readonly buffer MsF32 { float v; };
layout(buffer_reference, scalar, buffer_reference_align = 4) writeonly buffer MsF32Out { float v; };

// The float at byte address a + 4 i.
float ms_at(uint64_t a, uint64_t i) { return MsF32(a + 4ul * i).v; }
void ms_put(uint64_t a, uint64_t i, float x) { MsF32Out(a + 4ul * i).v = x; }

// Dims [4c, 4c + 4) of the n-float row at byte address `row` (zeros past
// n); one 16-byte load when `vec` (n % 4 == 0, the row 16-byte aligned).
vec4 ms_chunk(uint64_t row, uint c, uint n, bool vec) {
  if (vec) return MsVec4(row + 16ul * c).v;
  vec4 r = vec4(0.0);
  [[unroll]] for (uint e = 0u; e < 4u; ++e)
    if (4u * c + e < n) r[e] = MsF32(row + 4ul * (4u * c + e)).v;
  return r;
}

const float kLog2e = 1.4426950408889634;
const float kLow = -1.0e30;  // below every score, and finite

#ifdef MLA_DECODE_SPLIT

const uint kThreads = mla_decode_kSplitThreads;
const uint kStep = 32u;                       // tokens a step
const uint kLanes = kThreads / kStep;         // invocations per token's dot
const uint kVLanes = 32u;                     // invocations per token's V chunks
const uint kVGroups = kThreads / kVLanes;     // token groups the V sums run in
const uint kVChunks = 2u;                     // V chunks an invocation owns a pass
const uint kPassChunks = kVLanes * kVChunks;  // 256 dims a pass

shared vec4 ms_q[mla_decode_kSplitMaxDq / 4u];
shared float ms_part[2][kStep][kLanes];
shared float ms_score[2][kStep];
shared vec4 ms_acc[kVGroups][kPassChunks];
shared float ms_l[kVGroups];

void ms_split() {
  const uint h = gl_WorkGroupID.x, z = gl_WorkGroupID.y, i = gl_LocalInvocationIndex;
  const uint heads = p.heads, dq = p.dq, dv = p.dv, n = p.num_splits;
  if (h >= heads || z >= n || gl_WorkGroupSize.x != kThreads || gl_WorkGroupSize.y != 1u ||
      gl_WorkGroupSize.z != 1u || dq == 0u || dq > mla_decode_kSplitMaxDq)
    return;
  const TokenRange range = token_range(p.seq_len, 0u, n, z);
  const uint q_chunks = (dq + 3u) / 4u, v_chunks = (dv + 3u) / 4u;
  const uint64_t qa = uint64_t(p.q), ka = uint64_t(p.k), va = uint64_t(p.v);
  const bool vec_k = dq % 4u == 0u && ((qa | ka) & 15ul) == 0ul;
  const bool vec_v = dv % 4u == 0u && (va & 15ul) == 0ul;
  for (uint c = i; c < q_chunks; c += kThreads)
    ms_q[c] = ms_chunk(qa + 4ul * h * dq, c, dq, vec_k);
  barrier();
  const float score_scale = kLog2e / sqrt(float(dq));
  const uint64_t k_tok = 4ul * heads * dq, v_tok = 4ul * heads * dv;
  const uint64_t k_head = ka + 4ul * h * dq, v_head = va + 4ul * h * dv;
  const uint kt = i / kLanes, kl = i % kLanes;     // the token and lane of the dot
  const uint vg = i / kVLanes, vl = i % kVLanes;   // the V token group and lane
  const uint64_t part = (uint64_t(h) * n + z);

  for (uint c0 = 0u; c0 < v_chunks; c0 += kPassChunks) {
    float m = kLow, l = 0.0;  // l: this invocation's V group's tokens
    vec4 acc[kVChunks];
    [[unroll]] for (uint j = 0u; j < kVChunks; ++j) acc[j] = vec4(0.0);
    uint par = 0u;
    for (uint t = range.t0; t < range.t1; t += kStep) {
      const uint lim = min(kStep, range.t1 - t);
      // V first: it does not depend on the scores.
      vec4 vb[kStep / kVGroups][kVChunks];
      [[unroll]] for (uint r = 0u; r < kStep / kVGroups; ++r) {
        const uint u = vg + kVGroups * r;
        [[unroll]] for (uint j = 0u; j < kVChunks; ++j) {
          const uint c = c0 + vl + kVLanes * j;
          vb[r][j] = u < lim && c < v_chunks
                         ? ms_chunk(v_head + uint64_t(t + u) * v_tok, c, dv, vec_v)
                         : vec4(0.0);
        }
      }
      float d = 0.0;
      if (kt < lim) {
        const uint64_t row = k_head + uint64_t(t + kt) * k_tok;
        for (uint c = kl; c < q_chunks; c += kLanes) d += dot(ms_q[c], ms_chunk(row, c, dq, vec_k));
      }
      ms_part[par][kt][kl] = d;
      barrier();
      if (i < kStep) {
        float s = 0.0;
        [[unroll]] for (uint e = 0u; e < kLanes; ++e) s += ms_part[par][i][e];
        ms_score[par][i] = i < lim ? s * score_scale : kLow;
      }
      barrier();
      float m_new = m;
      for (uint u = 0u; u < lim; ++u) m_new = max(m_new, ms_score[par][u]);
      const float alpha = exp2(m - m_new);  // 0 at the first step
      l *= alpha;
      [[unroll]] for (uint j = 0u; j < kVChunks; ++j) acc[j] *= alpha;
      [[unroll]] for (uint r = 0u; r < kStep / kVGroups; ++r) {
        const uint u = vg + kVGroups * r;
        const float pu = u < lim ? exp2(ms_score[par][u] - m_new) : 0.0;
        l += pu;
        [[unroll]] for (uint j = 0u; j < kVChunks; ++j) acc[j] += pu * vb[r][j];
      }
      m = m_new;
      par ^= 1u;
    }
    // Every invocation kept the same max: the groups' sums add.
    [[unroll]] for (uint j = 0u; j < kVChunks; ++j) ms_acc[vg][vl + kVLanes * j] = acc[j];
    if (vl == 0u) ms_l[vg] = l;
    barrier();
    const uint dim = 4u * c0 + i;  // the pass dim this invocation writes
    if (dim < dv) {
      float o = 0.0;
      [[unroll]] for (uint g = 0u; g < kVGroups; ++g) o += ms_acc[g][i / 4u][i % 4u];
      ms_put(uint64_t(p.part_acc), part * dv + dim, o);
    }
    if (c0 == 0u && i == 0u) {
      float lt = 0.0;
      [[unroll]] for (uint g = 0u; g < kVGroups; ++g) lt += ms_l[g];
      ms_put(uint64_t(p.part_ml), 2ul * part, lt > 0.0 ? m : uintBitsToFloat(0xff800000u));  // -inf
      ms_put(uint64_t(p.part_ml), 2ul * part + 1ul, lt);
    }
    barrier();  // ms_acc is written again by the next pass
  }
}

#endif  // MLA_DECODE_SPLIT

#ifdef MLA_DECODE_COMBINE

const uint kThreads = mla_decode_kCombineThreads;

shared float mc_weight[mla_decode_kMaxSplits];

void ms_combine() {
  const uint h = gl_WorkGroupID.x, i = gl_LocalInvocationIndex, n = p.num_splits, dv = p.dv;
  if (h >= p.heads || gl_WorkGroupSize.x != kThreads || gl_WorkGroupSize.y != 1u ||
      gl_WorkGroupSize.z != 1u || n > mla_decode_kMaxSplits)
    return;
  const uint64_t mla = uint64_t(p.part_ml) + 8ul * h * n;  // head h's (max, sum) pairs
  // Every invocation finds the same largest live max and denominator.
  float m = kLow;
  for (uint z = 0u; z < n; ++z)
    if (ms_at(mla, 2u * z + 1u) > 0.0) m = max(m, ms_at(mla, 2u * z));
  float total = 0.0;
  for (uint z = 0u; z < n; ++z) {
    const float lz = ms_at(mla, 2u * z + 1u);
    if (lz > 0.0) total += exp2(ms_at(mla, 2u * z) - m) * lz;
  }
  if (i < n) mc_weight[i] = ms_at(mla, 2u * i + 1u) > 0.0 ? exp2(ms_at(mla, 2u * i) - m) : 0.0;
  barrier();
  const uint64_t acc = uint64_t(p.part_acc) + 4ul * h * n * dv;
  for (uint d = i; d < dv; d += kThreads) {
    float o = 0.0;
    for (uint z = 0u; z < n; ++z)
      if (mc_weight[z] > 0.0) o += mc_weight[z] * ms_at(acc, uint64_t(z) * dv + d);
    o = total > 0.0 ? o / total : 0.0;
    if (p.use_gate != 0u) o *= 1.0 / (1.0 + exp(-ms_at(uint64_t(p.g), uint64_t(h) * dv + d)));
    ms_put(uint64_t(p.out_), uint64_t(h) * dv + d, o);
  }
}

#endif  // MLA_DECODE_COMBINE

#endif  // SPARKRT_MLA_DECODE_SPLIT_GLSL_
