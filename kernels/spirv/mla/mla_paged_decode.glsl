// The MLA decode kernels of module mla on SPIR-V: one query token per
// sequence over the compressed MLA cache, fp8 E4M3 (one pass or split-KV)
// or NVFP4 (contract in docs/kernels.md, "Module mla"; the CUDA original is
// kernels/ptx/mla.cu). The entry file declares the push-constant block `p`
// with the signature's parameters, defines
//
//   MLA_NVFP4  1: NVFP4 cache (block_stride_bytes, data_section_bytes)
//              0: fp8 (k_scale, v_scale, cache_stride, window, sinks, pool)
//   MLA_SPLIT  1: split-KV partials (part_acc, part_ml), 0: o
//
// and includes this file, which defines main().
//
// Geometry. Both of the op's geometries are taken, for either format, told
// apart by the block as on CUDA: block 320 is the tiled one (grid.x =
// num_kv_heads * ceil(group / 16), splits along z: workgroup x serves the
// 16 query heads 16 (x % ceil(group / 16)) .. of its KV head, as the CUDA
// kernel's CTA); block 256 is one workgroup per query head (grid.x =
// num_q_heads; not the split entries'). There the workgroups of a KV head
// share its heads out in chunks of up to 16 (at least 4, when the group has
// them): the first chunks' workgroups serve them and the rest return at
// once, so each cache row is read by ceil(group / chunk) workgroups instead
// of group of them. The chunks are as small as keeps about
// kTargetWorkgroups workgroups busy (few sequences: more, smaller chunks).
//
// Design. A workgroup walks its tokens (the compressed rows first, then the
// window) in tiles of T <= 8 (5 workgroup barriers a tile), f32 arithmetic,
// no subgroup operations:
//
//   stage    every thread converts its 16-byte chunks of the tile's K rows
//            to f32 in shared memory: fp8 by bit moves into f16 (exact,
//            value * 2^-8), NVFP4 from bits (exact, times the group's
//            scale). A tile's loads are issued a tile ahead, its rows
//            located two tiles ahead and its block ids read three ahead.
//   scores   thread (slice s, head h) holds q of head h for the 4-dim
//            groups s, s + 16, ... in registers and takes its share of
//            every token's dot product. The 16 head lanes of a slice are
//            adjacent threads, so a warp's shared loads touch the same
//            16 bytes of two slices (broadcast). A workgroup of fewer heads
//            runs 16 / heads tokens side by side.
//   softmax  thread (token, head) sums the 16 shares, one online softmax
//            per head in base 2.
//   output   thread (head lane hl, quad lane ql) adds the weighted V rows
//            into heads hl, hl + 4, ... times dims 4 (ql + 64k) .. + 3;
//            V is the K rows' first dv values when v_cache is k_cache (as
//            MLA stores it), else its rows are staged over the K rows once
//            the scores are taken.
//
// Scales (k_scale and 2^8, log2 e and inv_sqrt_d, v_scale) are applied to
// each f32 score and to the output, never to the staged values. Split z of
// the split entry takes the contract's whole tiles of mla_kTile tokens
// (ceil(tiles / num_splits) each), not sparkrt/contract/split_kv.h's rule.
#ifndef SPARKRT_MLA_PAGED_DECODE_GLSL_
#define SPARKRT_MLA_PAGED_DECODE_GLSL_

#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_control_flow_attributes : require

#include "sparkrt/contract/mla.glsl"

// The launch's dynamic shared memory (the CUDA kernels' stages or scratch):
// declared so that any launch is accepted; not used.
layout(constant_id = 3) const uint kDynamicSharedBytes = 0;

const uint kThreads = mla_kThreads;  // the threads that compute (block 320: the first 256)
const uint kHeads = mla_kTiledRows;  // query heads a workgroup serves, at most
const uint kSlices = kThreads / kHeads;  // score slices of a row
const uint kMaxTile = 8;             // tokens a tile
// A staged row is kv_cache_dim rounded up to 16 values plus 4 floats (the
// rows of a tile then start on different banks); room for kMaxTile MLA
// rows, fewer of wider ones.
const uint kStageFloats = kMaxTile * (mla_kCacheDim + 4u);
const uint kMaxStaged = 2;           // 16-byte chunks a thread stages a tile
const uint kTargetWorkgroups = 256;  // per-head geometry: busy workgroups wanted
const uint kMinHeads = 4;            // per-head geometry: fewest heads a workgroup
const float kLog2e = 1.4426950408889634;
// Below every score, and finite: Vulkan does not promise that float
// arithmetic keeps infinities. An empty split's max, -inf in the contract,
// is stored by its bits.
const float kLow = -1.0e30;
const uint kMinusInfBits = 0xff800000u;

// Shared memory, about 28 KB (lavapipe gives 32).
//   stage_s   a tile's staged rows [token][pitch], f32: K, then V for a
//             separate V pool
//   part_s    the score shares [token][slice][head], rows padded
//   score_s   the tile's scores (base 2) [token][head]
//   weight_s  softmax weights [token][head % 4] of heads (h % 4) + 4i
//   alpha_s   this tile's rescale of each head's output, the same order;
//             after the tiles each head's output factor
//   src_s     three tiles' row addresses (a ring: the tile in use, the one
//             loading, the one being located): K data, K scales, V data,
//             V scales; 0 where a token is not read
shared vec4 stage_s[kStageFloats / 4u];
shared float part_s[kMaxTile * (kSlices + 1u) * kHeads];
shared float score_s[kMaxTile * kHeads];
shared vec4 weight_s[kMaxTile * 4u];
shared vec4 alpha_s[4];
shared uint64_t src_s[3u * kMaxTile * 4u];

// barrier(), with the availability and visibility of the workgroup's shared
// memory written out, as the Vulkan memory model (the module's) states them.
void mla_decode_barrier() {
  controlBarrier(gl_ScopeWorkgroup, gl_ScopeWorkgroup, gl_StorageSemanticsShared,
                 gl_SemanticsAcquireRelease | gl_SemanticsMakeAvailable | gl_SemanticsMakeVisible);
}

layout(buffer_reference, scalar, buffer_reference_align = 16) readonly buffer MlaChunk16 { uvec4 v; };
layout(buffer_reference, scalar, buffer_reference_align = 8) readonly buffer MlaChunk8 { uvec2 v; };

// What a workgroup's decode needs, fixed for the launch.
struct MlaGeom {
  uint seq, kvh, h0, hc;        // query heads h0 .. h0 + hc - 1 (hc <= 16) of KV head kvh
  uint num_q_heads, nkv;
  uint dk, dq, dv;              // kv_cache_dim, q_head_dim, kv_cache_dim - 64
  uint pitch4;                  // a staged row, in vec4
  uint T;                       // tokens a tile
  uint n_comp, t0;              // compressed rows; the window's first token
  uint u0, u1;                  // the virtual tokens served, [u0, u1)
  uint block_size, block_shift; // block_shift: log2(block_size), or 32
  uint z, splits;
  uint64_t q, k_cache, v_cache, comp, table;
  uint64_t block_bytes;         // between cache blocks
  uint64_t data_bytes;          // NVFP4: the scale section's offset in a block
  bool separate_v;              // V from its own pool (else the K rows)
  bool aligned;                 // every row chunk can be one vector load
  float score_scale;            // f32 dot product -> score in base 2
  float v_unit;                 // staged V -> V
};

// Four E4M3 codes as f32 * 2^-8, in order: each code's exponent and
// mantissa bits moved to bits 13..7 (and its sign to 15) of an f16 make the
// f16 of its value * 2^-8 exactly, subnormals included. NaN codes read as
// +-480 (the contract has none).
vec4 fp8x4_to_vec4(uint w) {
  const vec2 a = unpackHalf2x16(((w << 7u) & 0x3f803f80u) | ((w << 8u) & 0x80008000u));  // bytes 0, 2
  const vec2 b = unpackHalf2x16(((w >> 1u) & 0x3f803f80u) | (w & 0x80008000u));         // bytes 1, 3
  return vec4(a.x, b.x, a.y, b.y);
}

// An E2M1 nibble as f32, built from bits: 0 and 0.5 (codes 0, 1), else
// exponent (mag >> 1) - 1 and mantissa bit mag & 1. (An f16 made by moving
// the bits would be subnormal for 0.5, which a driver may flush.)
float e2m1_to_f32(uint n) {
  const uint mag = n & 7u;
  return uintBitsToFloat((mag < 2u ? mag * 0x3f000000u : (mag + 252u) << 22u) | ((n & 8u) << 28u));
}

// The block id behind virtual token u, loaded a tile before its rows are
// located (0 where none is needed: past the range, or a compressed row).
int token_block(in MlaGeom g, uint64_t u) {
  if (u >= g.u1 || u < g.n_comp) return 0;
  const uint t = g.t0 + (uint(u) - g.n_comp);
  return I32Ptr(g.table + 4ul * (g.block_shift < 32u ? t >> g.block_shift : t / g.block_size)).v[0];
}

// The row addresses of virtual token u in block b (0: not read: past the
// range, or behind a negative block id, which is outside the contract).
void token_rows(in MlaGeom g, uint64_t u, int b, out uint64_t kd, out uint64_t ks,
                out uint64_t vd, out uint64_t vs) {
  kd = 0ul;
  ks = 0ul;
  vd = 0ul;
  vs = 0ul;
  if (u >= g.u1) return;
  if (u < g.n_comp) {  // fp8 only: K the whole row, V its first dv values
    kd = g.comp + ((uint64_t(g.seq) * g.n_comp + u) * g.nkv + g.kvh) * g.dk;
    vd = kd;
    return;
  }
  if (b < 0) return;
  const uint t = g.t0 + (uint(u) - g.n_comp);
  const uint in_block = g.block_shift < 32u ? t & (g.block_size - 1u) : t % g.block_size;
  const uint64_t i0 = (uint64_t(in_block) * g.nkv + g.kvh) * g.dk;  // the row's first value
  const uint64_t block = uint64_t(b) * g.block_bytes;
#if MLA_NVFP4
  kd = g.k_cache + block + i0 / 2ul;
  ks = g.k_cache + block + g.data_bytes + i0 / 16ul;
  vd = g.v_cache + block + i0 / 2ul;
  vs = g.v_cache + block + g.data_bytes + i0 / 16ul;
#else
  kd = g.k_cache + block + i0;
  vd = g.v_cache + block + i0;
#endif
}

// Chunk k (values 16k .. 16k + 15) of a row of `len` values: fp8, the 16
// bytes (zeros past the row); NVFP4, the 8 data bytes in x, y and the
// group's scale byte in z. Zeros for a row not read.
uvec4 load_chunk(uint64_t row, uint64_t scales, uint k, uint len, bool aligned) {
  if (row == 0ul) return uvec4(0u);
#if MLA_NVFP4
  uvec2 d;
  if (aligned) {
    d = MlaChunk8(row + 8ul * k).v;
  } else {
    d = uvec2(0u);
    [[unroll]] for (uint e = 0u; e < 8u; ++e)
      d[e / 4u] |= uint(U8Ptr(row + 8ul * k + e).v[0]) << (8u * (e % 4u));
  }
  return uvec4(d, uint(U8Ptr(scales + k).v[0]), 0u);
#else
  if (aligned) return MlaChunk16(row + 16ul * k).v;
  uvec4 w = uvec4(0u);
  for (uint e = 0u; e < 16u; ++e)
    if (16u * k + e < len) w[e / 4u] |= uint(U8Ptr(row + 16ul * k + e).v[0]) << (8u * (e % 4u));
  return w;
#endif
}

// A chunk into stage_s as 16 f32 (the staged units: fp8 * 2^-8; NVFP4
// e2m1 * scale, exact).
void stage_chunk(uint at4, uvec4 w) {
#if MLA_NVFP4
  const float s = fp8_e4m3_to_f32(w.z);
  [[unroll]] for (uint i = 0u; i < 4u; ++i) {
    const uint x = w[i / 2u] >> (16u * (i % 2u));  // nibbles 4i .. 4i + 3
    stage_s[at4 + i] = vec4(e2m1_to_f32(x), e2m1_to_f32(x >> 4u), e2m1_to_f32(x >> 8u),
                            e2m1_to_f32(x >> 12u)) * s;
  }
#else
  [[unroll]] for (uint i = 0u; i < 4u; ++i) stage_s[at4 + i] = fp8x4_to_vec4(w[i]);
#endif
}

#if MLA_NVFP4
const float kStagedUnit = 1.0;
#else
const float kStagedUnit = 256.0;      // 2^8
#endif

#define MLA_MAX_VEC 9    // q vec4 a thread: kv_cache_dim <= 576
#define MLA_MAX_QUADS 2  // output quads a head: dv <= 512
#define MLA_DECODE_FN decode_576
#include "mla_paged_decode_tile.glsl"
#undef MLA_MAX_VEC
#undef MLA_MAX_QUADS
#undef MLA_DECODE_FN
#define MLA_MAX_VEC 16   // kv_cache_dim <= 1024
#define MLA_MAX_QUADS 4  // dv <= 960
#define MLA_DECODE_FN decode_1024
#include "mla_paged_decode_tile.glsl"
#undef MLA_MAX_VEC
#undef MLA_MAX_QUADS
#undef MLA_DECODE_FN

void main() {
  const uint nq = p.num_q_heads, nkv = p.num_kv_heads, dk = p.kv_cache_dim, dq = p.q_head_dim;
  // The block as a plain value (glslang mis-orders logic on specialization
  // constants); the dynamic shared memory is not needed.
  uvec3 block = gl_WorkGroupSize;
  // A launch outside the contract returns without writing, as the CUDA
  // kernel does (the op checks shapes first).
  if (block.y != 1u || block.z != 1u || nkv == 0u || nq == 0u || nq % nkv != 0u ||
      p.block_size == 0u || dq == 0u || dq > dk || dk <= mla_kRopeDim || dk > mla_kMaxDim)
    return;
  const uint group = nq / nkv;
  const bool tiled = block.x == mla_kTiledThreads;
  MlaGeom g;
  if (tiled) {
    // The tiled kernel's shapes (docs/kernels.md, "Tiled decode").
#if MLA_NVFP4
    const bool aligned = p.block_stride_bytes % 16ul == 0ul && p.data_section_bytes % 4ul == 0ul;
#else
    const bool aligned = p.cache_stride % 16ul == 0ul;
#endif
    if (dk != mla_kCacheDim || dq % 16u != 0u || !aligned ||
        gridDim.x != nkv * ((group + kHeads - 1u) / kHeads))
      return;
  } else if (MLA_SPLIT != 0 || block.x != kThreads || gridDim.x != nq) {
    return;
  }
#if MLA_NVFP4
  if (dk % 16u != 0u) return;
#endif
#if MLA_SPLIT
  if (gridDim.z == 0u) return;
#else
  if (gridDim.z != 1u) return;
#endif
  if (tiled) {
    const uint per_kv = (group + kHeads - 1u) / kHeads;
    g.kvh = blockIdx.x / per_kv;
    const uint first = (blockIdx.x % per_kv) * kHeads;
    g.h0 = g.kvh * group + first;
    g.hc = min(kHeads, group - first);
  } else {
    // Chunks of the group's heads: as many as keep about kTargetWorkgroups
    // busy, of at most 16 and (where the group has them) at least kMinHeads.
    const uint64_t kv_rows = uint64_t(gridDim.y) * nkv;
    const uint want = uint((uint64_t(kTargetWorkgroups) + kv_rows - 1ul) / kv_rows);
    const uint fewest = (group + kHeads - 1u) / kHeads;
    const uint most = max(fewest, group / kMinHeads);
    const uint chunks = clamp(want, fewest, most);
    const uint per = (group + chunks - 1u) / chunks;
    g.kvh = blockIdx.x / group;
    const uint j = blockIdx.x % group;
    if (j * per >= group) return;  // another workgroup serves these heads
    g.h0 = g.kvh * group + j * per;
    g.hc = min(per, group - j * per);
  }
  g.seq = blockIdx.y;
  g.num_q_heads = nq;
  g.nkv = nkv;
  g.dk = dk;
  g.dq = dq;
  g.dv = dk - mla_kRopeDim;
  const uint pitch = (dk + 15u) / 16u * 16u + 4u;
  g.pitch4 = pitch / 4u;
  g.T = min(kMaxTile, kStageFloats / pitch);

  // The tokens: the window clamped to the block table's capacity, after
  // the compressed rows; split z takes whole tiles of 64 (mla_kTile) of
  // them, ceil(tiles / splits) each.
  const uint64_t capacity = uint64_t(p.max_blocks_per_seq) * p.block_size;
  const int sl = I32Ptr(p.seq_lens).v[g.seq];
  const uint len = sl <= 0 ? 0u : uint(min(uint64_t(sl), capacity));
#if MLA_NVFP4
  g.t0 = 0u;
  g.n_comp = 0u;
#else
  g.t0 = p.sliding_window > 0u && len > p.sliding_window ? len - p.sliding_window : 0u;
  g.n_comp = uint64_t(p.comp_pool) != 0ul ? p.comp_block_count : 0u;
#endif
  const uint n = g.n_comp + (len - g.t0);
#if MLA_SPLIT
  g.z = blockIdx.z;
  g.splits = gridDim.z;
  const uint64_t per_split =
      uint64_t((uint64_t(n) + mla_kTile - 1u) / mla_kTile + g.splits - 1u) / g.splits * mla_kTile;
  g.u0 = uint(min(uint64_t(n), per_split * g.z));
  g.u1 = uint(min(uint64_t(n), per_split * (g.z + 1u)));
#else
  g.z = 0u;
  g.splits = 1u;
  g.u0 = 0u;
  g.u1 = n;
#endif

  g.block_size = p.block_size;
  g.block_shift = (p.block_size & (p.block_size - 1u)) == 0u ? uint(findLSB(p.block_size)) : 32u;
  g.q = uint64_t(p.q);
  g.k_cache = uint64_t(p.k_cache);
  g.v_cache = uint64_t(p.v_cache);
  g.table = uint64_t(p.block_tables) + 4ul * uint64_t(g.seq) * p.max_blocks_per_seq;
  g.separate_v = g.v_cache != g.k_cache;
#if MLA_NVFP4
  g.comp = 0ul;
  g.block_bytes = p.block_stride_bytes;
  g.data_bytes = p.data_section_bytes;
  g.aligned = ((g.k_cache | g.v_cache | g.block_bytes) & 7ul) == 0ul;
  g.score_scale = p.inv_sqrt_d * kLog2e * kStagedUnit;
  g.v_unit = kStagedUnit;
#else
  g.comp = uint64_t(p.comp_pool);
  g.block_bytes = p.cache_stride;
  g.data_bytes = 0ul;
  g.aligned = ((g.k_cache | g.v_cache | g.comp | g.block_bytes | uint64_t(dk)) & 15ul) == 0ul;
  g.score_scale = p.inv_sqrt_d * kLog2e * p.k_scale * kStagedUnit;
  g.v_unit = p.v_scale * kStagedUnit;
#endif

  if (dk <= mla_kCacheDim)
    decode_576(g);
  else
    decode_1024(g);
}

#endif  // SPARKRT_MLA_PAGED_DECODE_GLSL_
