// The kernels of module turbo_paged_attention on SPIR-V: decode attention,
// one query token per sequence, over a paged bf16 K pool and a TurboQuant V
// pool (2-, 3- or 4-bit Lloyd-Max codes, an FP8 E4M3 scale per 16 values;
// contract in docs/kernels.md, "Module turbo_paged_attention", format in
// "TurboQuant V cache"; the CUDA original is
// kernels/ptx/turbo_paged_attention.cu). The entry file declares the
// push-constant block `p` with the signature's parameters, defines
//
//   TPA_BITS   2, 3 or 4: V bits per value
//   TPA_SPLIT  0: one pass (out), 1: split z's partials (part_acc, part_ml,
//              num_splits), merged by paged_attention.paged_decode_attn_combine
//
// and includes this file, which defines main().
//
// Design: paged_attention.glsl's, with V decoded on the way into the second
// product. Decode reads each K and V row once, so it is bound by memory
// once enough bytes are in flight and the instructions per byte stay few;
// a token's K row here is bf16 and its V row a few bytes, so the work per
// byte is higher than in the bf16 decode. A workgroup of 256 threads serves
// the hpc query heads (up to 8) of one KV head that grid.x gives it, every
// row read once for all of them, and walks its tokens in tiles of kPasses
// passes of TS token slots:
//
//   loaders   thread (slot j, head group g, chunk c) owns dims 8c .. 8c + 7
//             for HT query heads: one 16-byte load of a token's K row, and
//             its V row's 8 codes (8 * bits bits, in one aligned word, two
//             at 3 bits) and their group's scale byte. The scores take q
//             from shared memory, each q load serving the tile's kPasses
//             tokens, so that q holds no registers. Codes become values by
//             shift and mask and a lookup in the codebook in shared memory
//             (pairs of values at 2 bits; single values at 3 and 4, where a
//             table of pairs would make the lanes' random lookups collide in
//             shared-memory banks); the scale comes by bit moves and is
//             folded into the token's softmax weights (one multiply a head,
//             not one a value). The next tile's K and V rows are loaded as
//             soon as this tile's scores are taken (V into registers of its
//             own, a few words), and the block ids a tile ahead of them.
//   reducers  thread (slot j, head h) sums the loaders' shares of its tokens'
//             dot products from shared memory and keeps an online softmax in
//             base 2 for the slot and head. Two barriers a tile, no subgroup
//             operations (nothing depends on the subgroup size).
//
// At the end the slots merge as splits do. The arithmetic is f32: q and K
// exactly as stored, the scores scaled by inv_sqrt_d * log2(e) through q,
// each V value centroid * scale exactly (the scale's 2^-8 from its f16 form
// is folded into the table), the weights from exp2. No value is infinite
// (Vulkan does not promise to keep infinities); an empty split's -inf max is
// stored by its bits. Every array lives in registers: loops over them are
// unrolled with constant bounds and no early exit.
#ifndef SPARKRT_TURBO_PAGED_ATTENTION_GLSL_
#define SPARKRT_TURBO_PAGED_ATTENTION_GLSL_

#extension GL_EXT_control_flow_attributes : require

#include "sparkrt/contract/split_kv.h"
#include "sparkrt/contract/turbo_kv_cache.glsl"
#include "sparkrt/contract/turbo_paged_attention.glsl"

const uint kThreads = turbo_paged_attention_kThreads;
const uint kMaxHeads = turbo_paged_attention_kMaxHeadsPerCta;
const uint kMaxHeadDim = turbo_paged_attention_kMaxHeadDim;
const uint kGroup = turbo_kv_cache_kGroup;
const uint kBits = TPA_BITS;
const uint kPasses = 4;     // token passes a tile
const uint kRedFloats = 4096;
const float kLow = -1.0e30;  // below every score, and finite
const uint kMinusInfBits = 0xff800000u;
const float kLog2e = 1.4426950408889634;
// The E4M3 scale read as an f16 is scale * 2^-8; the table's values carry
// the 2^8 back (powers of two: exact).
const float kFp8Unit = 256.0;

// The caches seen through readonly references.
layout(buffer_reference, scalar, buffer_reference_align = 16) readonly buffer TpaU32x4 { uvec4 v; };
layout(buffer_reference, scalar, buffer_reference_align = 4) readonly buffer TpaU32 { uint v[]; };
layout(buffer_reference, scalar, buffer_reference_align = 1) readonly buffer TpaU8 { uint8_t v; };

// Shared memory, 31.2 KB at most (lavapipe gives 32).
//   red_s       the loaders' shares of the dot products [token][head][chunk]
//               (kPasses * TS * HP * C <= 4096 floats); after the tiles the
//               slot tree's outputs (half the slots' at most, <= 4096 floats)
//   q_s         q times inv_sqrt_d * log2(e), zero past hpc: head h's dims
//               8c + 4 half .. + 3 at vec4 h * dim / 4 + half * dim / 8 + c,
//               so that a warp's lanes read consecutive vec4s
//   weight_s    softmax weights of a tile's tokens [token][head]
//   alpha_s     the factor of each (slot, head)'s running sums, then the
//               slots' merge weights
//   slot_m_s, slot_l_s  each (slot, head)'s max and sum after the tiles
//   code_s      the codebook times kFp8Unit: pairs (2 bits) or single values
shared vec4 red_s[kRedFloats / 4];
shared vec4 q_s[kMaxHeads * kMaxHeadDim / 4];
shared vec4 weight_s[kPasses * kThreads / 4];
shared float alpha_s[kThreads];
shared float slot_m_s[kThreads];
shared float slot_l_s[kThreads];
shared float head_m_s[kMaxHeads];
shared float head_l_s[kMaxHeads];
#if TPA_BITS == 2
shared vec2 code_s[16];
#elif TPA_BITS == 3
shared float code_s[8];
#else
shared float code_s[16];
#endif

// What a workgroup's decode needs, fixed for the launch.
struct TpaGeom {
  uint seq, z, h0, hpc, kv_head, dim, num_q_heads, num_splits;
  uint lo, hi;                   // the tokens attended: [lo, hi)
  uint block_size, block_shift;  // block_shift: log2(block_size), or 32 when not a power of two
  uint64_t k_cache, v_cache, out_at, part_acc, part_ml;
  uint64_t table;           // the sequence's block table
  uint64_t k_block;         // bytes between K blocks (dense)
  uint64_t k_row;           // bytes between a K block's tokens
  uint64_t v_block;         // v_block_stride_bytes
  uint64_t v_token;         // bytes of a token's codes (all heads)
  uint64_t v_scales;        // v_data_section_bytes
  uint64_t v_token_scales;  // bytes of a token's scales (all heads)
  // Every offset within a K or V block fits 32 bits (blocks under 4 GiB,
  // both V sections inside the block): the loads' addresses then take
  // 32-bit products (the strides' low words below) and one 64-bit sum each.
  bool small;
  uint k_block32, k_row32, v_block32, v_token32, v_token_scales32;
};

// A lane's offsets within a block: its K chunk within a token's row, the
// aligned word holding its first code within a token's codes, its scale
// within the V block (the section's start included); 64-bit for blocks that
// are not small.
uint64_t k_lane(in TpaGeom gm, uint c) { return 2ul * (uint64_t(gm.kv_head) * gm.dim + 8u * c); }
uint64_t codes_lane(in TpaGeom gm, uint c) {
  return uint64_t(gm.kv_head) * (gm.dim * kBits / 8u) + ((kBits * c) & ~3u);
}
uint64_t scale_lane(in TpaGeom gm, uint c) {
  return gm.v_scales + uint64_t(gm.kv_head) * (gm.dim / kGroup) + (8u * c) / kGroup;
}

// q (scaled to give scores in base 2) and the codebook into shared memory;
// the caller's barrier publishes them.
void fill_shared(in TpaGeom gm) {
  const uint tid = gl_LocalInvocationIndex;
  const uint d4 = gm.dim / 4u;
  const float q_scale = p.inv_sqrt_d * kLog2e;
  for (uint i = tid; i < kMaxHeads * d4; i += kThreads) {
    const uint h = i / d4, r = i % d4;
    const uint half_ = r / (d4 / 2u), c = r % (d4 / 2u);  // the dims 8c + 4 half_ ..
    vec4 v = vec4(0.0);
    if (h < gm.hpc) {
      U16Ptr at = U16Ptr(uint64_t(p.q) +
                               2ul * (uint64_t(gm.seq) * p.q_stride +
                                      uint64_t(gm.h0 + h) * gm.dim + 8u * c + 4u * half_));
      [[unroll]] for (uint e = 0u; e < 4u; ++e)
        v[e] = q_scale * bf16_to_f32(uint(at.v[e]));
    }
    q_s[i] = v;
  }
  // One thread with constant indices: a constant array indexed by a
  // variable would be copied to local memory.
  if (tid == 0u) {
#if TPA_BITS == 2
    [[unroll]] for (uint e = 0u; e < 16u; ++e)
      code_s[e] = kFp8Unit * vec2(turbo_kv_cache_kCentroids2[e & 3u],
                                  turbo_kv_cache_kCentroids2[e >> 2u]);
#elif TPA_BITS == 3
    [[unroll]] for (uint e = 0u; e < 8u; ++e) code_s[e] = kFp8Unit * turbo_kv_cache_kCentroids3[e];
#else
    [[unroll]] for (uint e = 0u; e < 16u; ++e) code_s[e] = kFp8Unit * turbo_kv_cache_kCentroids4[e];
#endif
  }
}

// The 8 values of a lane's codes (the 8 * kBits low bits of `w`), times
// kFp8Unit, as stored before the scale.
void decode_codes(uint w, out float v[8]) {
#if TPA_BITS == 2
  [[unroll]] for (uint k = 0u; k < 4u; ++k) {
    const vec2 pr = code_s[(w >> (4u * k)) & 15u];
    v[2u * k] = pr.x;
    v[2u * k + 1u] = pr.y;
  }
#else
  [[unroll]] for (uint i = 0u; i < 8u; ++i)
    v[i] = code_s[(w >> (kBits * i)) & ((1u << kBits) - 1u)];
#endif
}

// The lane's 8 * kBits code bits from its loaded words, in the low bits:
// `shift` is the first code's bit in w0 (w1 the next word, at 3 bits).
uint lane_codes(uint w0, uint w1, uint shift) {
  if (kBits == 3u) return shift == 0u ? w0 : (w0 >> shift) | (w1 << (32u - shift));
  return w0 >> shift;
}

// An E4M3 scale as f32 times 2^-8: its sign to bit 15 and its exponent and
// mantissa to bits 13..7 of an f16, subnormals included.
float scale_of(uint b) {
  return unpackHalf2x16(((b << 7u) & 0x3f80u) | ((b << 8u) & 0x8000u)).x;
}

uint in_block(in TpaGeom gm, uint t) {
  return gm.block_shift < 32u ? t & (gm.block_size - 1u) : t % gm.block_size;
}

// The block ids of the tokens of the tile from `start` that slot j loads,
// -1 where it loads none (past the range, or not a loader; a negative block
// id in the range is outside the contract and is not read either).
void block_ids(in TpaGeom gm, bool loader, uint start, uint j, uint TS, out int bid[kPasses]) {
  [[unroll]] for (uint p = 0u; p < kPasses; ++p) {
    const uint t = start + p * TS + j;
    bid[p] = -1;
    if (loader && t < gm.hi) {
      const uint b = gm.block_shift < 32u ? t >> gm.block_shift : t / gm.block_size;
      bid[p] = I32Ptr(gm.table + 4ul * b).v[0];
    }
  }
}

// Lane c's K chunks, codes (as loaded: one or two words) and scale bytes of
// the tile from `start`, all loads issued together (zeros where none is
// read). lane32: its offsets for small blocks (k, codes, scale).
void load_tile(in TpaGeom gm, uint start, uint j, uint TS, uint c, uvec3 lane32, bool two,
               in int bid[kPasses], out uvec4 kr[kPasses], out uint vw0[kPasses],
               out uint vw1[kPasses], out uint vsc[kPasses]) {
  [[unroll]] for (uint p = 0u; p < kPasses; ++p) {
    kr[p] = uvec4(0u);
    vw0[p] = 0u;
    vw1[p] = 0u;
    vsc[p] = 0u;
    if (bid[p] >= 0) {
      const uint64_t b = uint(bid[p]);
      const uint o = in_block(gm, start + p * TS + j);
      uint64_t k_at, v_block, codes_at, scale_at;
      if (gm.small) {
        k_at = gm.k_cache + b * gm.k_block32 + (o * gm.k_row32 + lane32.x);
        v_block = gm.v_cache + b * gm.v_block32;
        codes_at = v_block + (o * gm.v_token32 + lane32.y);
        scale_at = v_block + (o * gm.v_token_scales32 + lane32.z);
      } else {
        k_at = gm.k_cache + b * gm.k_block + (o * gm.k_row + k_lane(gm, c));
        v_block = gm.v_cache + b * gm.v_block;
        codes_at = v_block + (o * gm.v_token + codes_lane(gm, c));
        scale_at = v_block + (o * gm.v_token_scales + scale_lane(gm, c));
      }
      kr[p] = TpaU32x4(k_at).v;
      vw0[p] = TpaU32(codes_at).v[0];
      if (kBits == 3u && two) vw1[p] = TpaU32(codes_at).v[1];
      vsc[p] = uint(TpaU8(scale_at).v);
    }
  }
}

#define TPA_HT 4
#define TPA_DECODE_FN decode_ht4
#include "turbo_paged_attention_tile.glsl"
#undef TPA_HT
#undef TPA_DECODE_FN
#define TPA_HT 2
#define TPA_DECODE_FN decode_ht2
#include "turbo_paged_attention_tile.glsl"
#undef TPA_HT
#undef TPA_DECODE_FN
#define TPA_HT 1
#define TPA_DECODE_FN decode_ht1
#include "turbo_paged_attention_tile.glsl"
#undef TPA_HT
#undef TPA_DECODE_FN

// valid_head_dim() of the contract, from the generated mask (bit k: head_dim
// 16 k is valid).
bool valid_head_dim(uint d) {
  return d % 16u == 0u && d / 16u < 32u &&
         ((turbo_paged_attention_kValidHeadDimsBy16 >> (d / 16u)) & 1u) != 0u;
}

void main() {
  const uint nq = p.num_q_heads, nkv = p.num_kv_heads, dim = p.head_dim;
  // A launch outside the contract returns without writing (the op checks
  // shapes first), as the CUDA kernel does.
  if (gl_WorkGroupSize.x * gl_WorkGroupSize.y * gl_WorkGroupSize.z != kThreads ||
      !valid_head_dim(dim) || dim > kMaxHeadDim || nkv == 0u || p.block_size == 0u)
    return;
  const uint hpc = nq / gridDim.x;
  const uint group = nq / nkv;
  if (hpc == 0u || hpc > kMaxHeads || hpc * gridDim.x != nq || group * nkv != nq ||
      group % hpc != 0u)
    return;
  if (((uint64_t(p.v_cache) | p.v_block_stride_bytes) & 3ul) != 0ul ||
      (uint64_t(p.k_cache) & 15ul) != 0ul)
    return;
#if TPA_SPLIT
  const uint splits = p.num_splits;
  if (splits == 0u || splits > 65535u || gridDim.z != splits) return;
#else
  const uint splits = 1u;
#endif
  TpaGeom gm;
  gm.seq = blockIdx.y;
  gm.z = blockIdx.z;
  gm.hpc = hpc;
  gm.h0 = blockIdx.x * hpc;
  gm.kv_head = gm.h0 / group;
  gm.dim = dim;
  gm.num_q_heads = nq;
  gm.num_splits = splits;

  // The window, clamped to the block table's capacity, and split z's part
  // of it (sparkrt/contract/split_kv.h).
  const uint64_t capacity = uint64_t(p.max_blocks_per_seq) * p.block_size;
  const int len = I32Ptr(p.seq_lens).v[gm.seq];
  const uint t1 = len <= 0 ? 0u : uint(min(uint64_t(len), capacity));
#if TPA_SPLIT
  const TokenRange range = token_range(t1, p.sliding_window, splits, gm.z);
#else
  const TokenRange range = token_range(t1, p.sliding_window, 0u, 0u);
#endif
  gm.lo = range.t0;
  gm.hi = range.t1;

  gm.block_size = p.block_size;
  gm.block_shift = (p.block_size & (p.block_size - 1u)) == 0u ? uint(findLSB(p.block_size)) : 32u;
  gm.k_cache = uint64_t(p.k_cache);
  gm.v_cache = uint64_t(p.v_cache);
  gm.table = uint64_t(p.block_tables) + 4ul * uint64_t(gm.seq) * p.max_blocks_per_seq;
  gm.k_row = 2ul * nkv * dim;
  gm.k_block = uint64_t(p.block_size) * gm.k_row;
  gm.v_block = p.v_block_stride_bytes;
  gm.v_token = uint64_t(nkv) * dim * kBits / 8u;
  gm.v_scales = p.v_data_section_bytes;
  gm.v_token_scales = uint64_t(nkv) * (dim / kGroup);
  const uint64_t k4g = 0x100000000ul;
  gm.small = gm.k_block < k4g && gm.v_block < k4g &&
             uint64_t(p.block_size) * gm.v_token <= gm.v_scales &&
             gm.v_scales + uint64_t(p.block_size) * gm.v_token_scales <= gm.v_block;
  gm.k_block32 = uint(gm.k_block);
  gm.k_row32 = uint(gm.k_row);
  gm.v_block32 = uint(gm.v_block);
  gm.v_token32 = uint(gm.v_token);
  gm.v_token_scales32 = uint(gm.v_token_scales);
#if TPA_SPLIT
  gm.part_acc = uint64_t(p.part_acc);
  gm.part_ml = uint64_t(p.part_ml);
#else
  gm.out_at = uint64_t(p.out_);
#endif

  fill_shared(gm);
  barrier();
  if (hpc == 1u)
    decode_ht1(gm);
  else if (hpc == 2u)
    decode_ht2(gm);
  else
    decode_ht4(gm);
}

#endif  // SPARKRT_TURBO_PAGED_ATTENTION_GLSL_
