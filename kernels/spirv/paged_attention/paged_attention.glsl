// The kernels of module paged_attention on SPIR-V: decode attention, one
// query token per sequence, over a paged bf16 or fp8 E4M3 cache (contract
// in docs/kernels.md, "Module paged_attention", "Split-KV"; the CUDA
// original is kernels/ptx/paged_attention.cu). The entry file declares the
// push-constant block `p` with the signature's parameters, defines
//
//   PA_FP8    1: fp8 caches (k_scale, v_scale, cache_stride), 0: bf16
//   PA_MODE   PA_ONE_PASS, PA_SPLIT, PA_SPLIT_MERGE or PA_COMBINE
//
// and includes this file, which defines main().
//
// Design. Decode reads each K and V row once and does a few flops per byte,
// so it is bound by memory when enough bytes are in flight and the
// arithmetic per byte stays small. A workgroup of 256 threads serves the hpc
// query heads (up to 8) of one KV head that grid.x gives it, so every cache
// row is read once for all of them, and walks its tokens in tiles of N:
//
//   loaders   thread (slot j, head group g, chunk c) holds the 8 elements
//             8c .. 8c + 7 of a token's row (one 16-byte load of bf16, 8
//             bytes of fp8) for HT query heads (4, or 1 and 2 for smaller
//             groups; hpc > 4 takes two head groups, which read the same
//             bytes). The TS slots take TS consecutive tokens a pass, and a
//             tile is kPasses passes, whose K and V rows are all in flight
//             at once: the next tile's K rows are loaded as soon as this
//             tile's scores are taken, its V rows as soon as they are
//             added, and the block ids a tile ahead of that.
//   reducers  thread (slot j, head h) sums the loaders' shares of its
//             tokens' dot products from shared memory and keeps an online
//             softmax in base 2 for the slot and head, with no exchange
//             between slots; the loaders then add the weighted V rows into
//             their f32 outputs. Two barriers a tile, no subgroup
//             operations (nothing depends on the subgroup size).
//
// At the end the slots merge as splits do (their maxima, sums and outputs,
// through shared memory). The arithmetic is f32: q, K and V exactly as
// stored (fp8 through f16, which holds every E4M3 value), the scores scaled
// by inv_sqrt_d * log2(e) (and k_scale) through q, the weights from exp2.
//
// The split entries take split z's token range (docs/kernels.md,
// "Split-KV") and write its partials; the split-merge entries then merge in
// the last workgroup of each (sequence, head group) to arrive. Memory
// ordering follows the Vulkan memory model (the module's memory model: its
// entries share one). The partials are written and read as relaxed atomics
// at queue-family scope, a workgroup barrier orders every thread's writes
// before thread 0's acquire-release atomicAdd on the group's counter (queue
// family scope), and a barrier after it passes the acquire on to the
// workgroup: message passing, as the CUDA kernel's __syncthreads and
// atom.acq_rel.gpu. Shared memory is ordered by pa_barrier(). (glslang's
// `#pragma use_vulkan_memory_model` would mark every shared access
// non-private with availability and visibility at workgroup scope; lavapipe
// then computes wrong results, so shared accesses stay plain, as in any
// glslang shader that uses the model's atomics.)
#ifndef SPARKRT_PAGED_ATTENTION_GLSL_
#define SPARKRT_PAGED_ATTENTION_GLSL_

#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_control_flow_attributes : require

#include "sparkrt/contract/paged_attention.glsl"
#include "sparkrt/contract/split_kv.h"

#define PA_ONE_PASS 0
#define PA_SPLIT 1
#define PA_SPLIT_MERGE 2
#define PA_COMBINE 3

// The launch's dynamic shared memory (the op's staging, for the CUDA
// kernel's cp.async): declared so that any launch is accepted, not used.
layout(constant_id = 3) const uint kDynamicSharedBytes = 0;

const uint kThreads = paged_attention_kThreads;
const uint kMaxHeads = paged_attention_kMaxHeadsPerCta;  // query heads a workgroup serves
const uint kMaxHeadDim = paged_attention_kMaxHeadDim;
const uint kPasses = 4;    // token passes a tile
const uint kRedFloats = 4096;
// Below every score, and finite: Vulkan does not promise that float
// arithmetic keeps infinities (SignedZeroInfNanPreserve aside; lavapipe
// does not), so no value here is ever infinite. Where the contract stores
// -inf (an empty split's max) it is stored by its bits.
const float kLow = -1.0e30;
const uint kMinusInfBits = 0xff800000u;

// Shared memory, about 23 KB (lavapipe gives 32).
//   red_s       the loaders' shares of the dot products [token][head][chunk]
//               (kPasses * TS * HP * C <= kPasses * 4 * 256 floats); after
//               the tiles the slot tree's outputs (half the slots' at most,
//               <= 4 * 256 floats); in a merge the split weights
//   weight_s    softmax weights of a tile's tokens [token][head]
//   alpha_s     the factor of each (slot, head)'s running sums, then the
//               slots' merge weights; in a merge group_reduce's scratch
//   slot_m_s, slot_l_s  each (slot, head)'s max and sum after the tiles
shared vec4 red_s[kRedFloats / 4];
shared float weight_s[kPasses * kThreads];
shared float alpha_s[kThreads];
shared float slot_m_s[kThreads];
shared float slot_l_s[kThreads];
shared float head_m_s[kMaxHeads];
shared float head_l_s[kMaxHeads];
shared uint last_s;

void red_set(uint i, float v) { red_s[i >> 2u][i & 3u] = v; }
float red_get(uint i) { return red_s[i >> 2u][i & 3u]; }

// The sum of the n floats from red element i * n on.
float red_sum(uint i, uint n) {
  if (n % 4u == 0u) {
    vec4 s = vec4(0.0);
    for (uint k = 0u; k < n / 4u; ++k) s += red_s[i * (n / 4u) + k];
    return (s.x + s.y) + (s.z + s.w);
  }
  float s = 0.0;
  for (uint k = 0u; k < n; ++k) s += red_get(i * n + k);
  return s;
}

// f32 partials that another workgroup merges, as relaxed atomics at
// queue-family scope (always non-private: no availability or visibility
// operation is needed, and the counter's acquire-release orders them).
void store_partial_bits(uint64_t at, uint v) {
  atomicStore(U32Ptr(at).v[0], v, gl_ScopeQueueFamily, gl_StorageSemanticsBuffer,
              gl_SemanticsRelaxed);
}
void store_partial(uint64_t at, float v) { store_partial_bits(at, floatBitsToUint(v)); }
float load_partial(uint64_t at) {
  return uintBitsToFloat(atomicLoad(U32Ptr(at).v[0], gl_ScopeQueueFamily,
                                    gl_StorageSemanticsBuffer, gl_SemanticsRelaxed));
}

// barrier(), with the availability and visibility of the workgroup's shared
// memory written out, as the Vulkan memory model states them.
void pa_barrier() {
  controlBarrier(gl_ScopeWorkgroup, gl_ScopeWorkgroup, gl_StorageSemanticsShared,
                 gl_SemanticsAcquireRelease | gl_SemanticsMakeAvailable | gl_SemanticsMakeVisible);
}

// Reduces x over the aligned groups of T consecutive threads (T a power of
// two dividing kThreads); every thread gets its group's result. Called by
// all threads of the workgroup.
float group_reduce(float x, uint T, bool is_max) {
  const uint tid = gl_LocalInvocationIndex;
  alpha_s[tid] = x;
  pa_barrier();
  for (uint s = T / 2u; s > 0u; s /= 2u) {
    if (tid % T < s) {
      const float a = alpha_s[tid], b = alpha_s[tid + s];
      alpha_s[tid] = is_max ? max(a, b) : a + b;
    }
    pa_barrier();
  }
  const float r = alpha_s[tid - tid % T];
  pa_barrier();
  return r;
}

// out[row0 + r] = sum_z 2^(m_z - M) acc_z / sum_z 2^(m_z - M) l_z over the
// splits with l_z > 0 (M their largest m_z), zeros when there are none,
// rounded once to bf16, for rows r < nrows <= kMaxHeads of `splits` splits
// of `dim` values: paged_decode_attn_combine, and the split-merge entries'
// last workgroup. The weights are computed once into shared memory when
// they fit (nrows * splits <= kRedFloats), else per output.
void merge_splits(uint64_t part_acc, uint64_t part_ml, uint64_t dst, uint64_t row0, uint nrows,
                  uint splits, uint dim) {
  const uint tid = gl_LocalInvocationIndex;
  uint T = kThreads;  // threads a row
  while (T * nrows > kThreads) T /= 2u;
  const uint r = tid / T, k = tid % T;
  const bool on = r < nrows;
  const uint64_t ml = part_ml + 8ul * (row0 + (on ? r : 0u)) * splits;
  float m = kLow;
  if (on)
    for (uint z = k; z < splits; z += T)
      if (load_partial(ml + 8ul * z + 4ul) > 0.0) m = max(m, load_partial(ml + 8ul * z));
  m = group_reduce(m, T, true);
  const bool cached = nrows * splits <= kRedFloats;
  float l = 0.0;
  if (on) {
    for (uint z = k; z < splits; z += T) {
      const float lz = load_partial(ml + 8ul * z + 4ul);
      const float w = lz > 0.0 ? exp2(load_partial(ml + 8ul * z) - m) : 0.0;
      if (cached) red_set(r * splits + z, w);
      l += w * lz;
    }
  }
  l = group_reduce(l, T, false);
  if (on && k == 0u) {
    head_m_s[r] = m;
    head_l_s[r] = l;
  }
  pa_barrier();
  for (uint i = tid; i < nrows * dim; i += kThreads) {
    const uint rr = i / dim, d = i % dim;
    const uint64_t row = row0 + rr;
    const float mr = head_m_s[rr], lr = head_l_s[rr];
    float o = 0.0;
    if (lr > 0.0) {
      for (uint z = 0u; z < splits; ++z) {
        float w;
        if (cached) {
          w = red_get(rr * splits + z);
        } else {
          const float lz = load_partial(part_ml + 8ul * (row * splits + z) + 4ul);
          w = lz > 0.0 ? exp2(load_partial(part_ml + 8ul * (row * splits + z)) - mr) : 0.0;
        }
        if (w != 0.0) o += w * load_partial(part_acc + 4ul * ((row * splits + z) * dim + d));
      }
      o /= lr;
    }
    U16Ptr(dst + 2ul * (row * dim + d)).v[0] = uint16_t(f32_to_bf16(o));
  }
}

#if PA_MODE != PA_COMBINE

#if PA_MODE == PA_ONE_PASS
#define PA_NUM_SPLITS 1u
#else
#define PA_NUM_SPLITS p.num_splits
#endif

// A loader's 8 cache elements, as loaded and as f32 in the order kPerm:
// register i holds element kPerm[i] of the chunk (q and the outputs use the
// same order).
#if PA_FP8
#define PaChunk uvec2
const uint kChunkBytes = 8;
const uint kPerm[8] = uint[8](0u, 2u, 1u, 3u, 4u, 6u, 5u, 7u);
layout(buffer_reference, scalar, buffer_reference_align = 8) readonly buffer ChunkPtr { uvec2 v; };
// Four E4M3 codes as f16 pairs (0, 2) and (1, 3): the sign to bit 15, the
// exponent and mantissa bits to 14..7 make the f16 of value * 2^-8 exactly,
// subnormals included (the factor goes into q's and V's scales). NaN codes
// read as +-480.
void fp8x4_to_f32(uint w, out float e0, out float e2, out float e1, out float e3) {
  const vec2 a = unpackHalf2x16(((w << 7u) & 0x3f803f80u) | ((w << 8u) & 0x80008000u));
  const vec2 b = unpackHalf2x16(((w >> 1u) & 0x3f803f80u) | (w & 0x80008000u));
  e0 = a.x;
  e2 = a.y;
  e1 = b.x;
  e3 = b.y;
}
void chunk_to_f32(uvec2 w, out float v[8]) {
  fp8x4_to_f32(w.x, v[0], v[1], v[2], v[3]);
  fp8x4_to_f32(w.y, v[4], v[5], v[6], v[7]);
}
const float kFp8Unit = 256.0;  // 2^8: what chunk_to_f32's values are short of
#else
#define PaChunk uvec4
const uint kChunkBytes = 16;
const uint kPerm[8] = uint[8](0u, 1u, 2u, 3u, 4u, 5u, 6u, 7u);
layout(buffer_reference, scalar, buffer_reference_align = 16) readonly buffer ChunkPtr { uvec4 v; };
void chunk_to_f32(uvec4 w, out float v[8]) {
  [[unroll]] for (uint i = 0u; i < 4u; ++i) {
    v[2u * i] = uintBitsToFloat(w[i] << 16u);
    v[2u * i + 1u] = uintBitsToFloat(w[i] & 0xffff0000u);
  }
}
#endif

// What a workgroup's decode needs, fixed for the launch.
struct PaGeom {
  uint seq, z, h0, hpc, dim, num_q_heads, num_splits;
  uint lo, hi;                  // the tokens attended: [lo, hi)
  uint block_size, block_shift;  // block_shift: log2(block_size), or 32 when not a power of two
  uint q_stride;
  uint64_t q, k_cache, v_cache, out_at, part_acc, part_ml;
  uint64_t table;               // the sequence's block table
  uint64_t block_bytes;         // between cache blocks
  uint64_t row_bytes;           // between a block's tokens
  uint64_t head_bytes;          // the KV head's row within a token
  float q_scale, v_scale;
};

const uint64_t kNoRow = 0xfffffffffffffffful;

// The block ids of the tokens of the tile from `start` that slot j loads,
// -1 where it loads none (past the range, or not a loader).
void block_ids(in PaGeom gm, bool loader, uint start, uint j, uint TS, out int bid[kPasses]) {
  [[unroll]] for (uint p = 0u; p < kPasses; ++p) {
    const uint t = start + p * TS + j;
    bid[p] = -1;
    if (loader && t < gm.hi) {
      const uint b = gm.block_shift < 32u ? t >> gm.block_shift : t / gm.block_size;
      bid[p] = I32Ptr(gm.table + 4ul * b).v[0];
    }
  }
}

// The byte offsets of those tokens' chunks in a cache, kNoRow where none
// is read (a negative block id is outside the contract: not read).
void row_offsets(in PaGeom gm, uint start, uint j, uint TS, uint chunk_off, in int bid[kPasses],
                 out uint64_t off[kPasses]) {
  [[unroll]] for (uint p = 0u; p < kPasses; ++p) {
    const uint t = start + p * TS + j;
    const uint in_block = gm.block_shift < 32u ? t & (gm.block_size - 1u) : t % gm.block_size;
    off[p] = bid[p] < 0 ? kNoRow
                        : uint64_t(bid[p]) * gm.block_bytes + uint64_t(in_block) * gm.row_bytes +
                              gm.head_bytes + chunk_off;
  }
}

PaChunk load_chunk(uint64_t cache, uint64_t off) {
  return off == kNoRow ? PaChunk(0u) : ChunkPtr(cache + off).v;
}

#define PA_HT 4
#define PA_DECODE_FN decode_ht4
#include "paged_attention_tile.glsl"
#undef PA_HT
#undef PA_DECODE_FN
#define PA_HT 2
#define PA_DECODE_FN decode_ht2
#include "paged_attention_tile.glsl"
#undef PA_HT
#undef PA_DECODE_FN
#define PA_HT 1
#define PA_DECODE_FN decode_ht1
#include "paged_attention_tile.glsl"
#undef PA_HT
#undef PA_DECODE_FN

void main() {
  const uint tid = gl_LocalInvocationIndex;
  const uint nq = p.num_q_heads, nkv = p.num_kv_heads, dim = p.head_dim;
  // A launch outside the contract returns without writing (the op checks
  // shapes first), as the CUDA kernel does.
  if (gl_WorkGroupSize.x * gl_WorkGroupSize.y * gl_WorkGroupSize.z != kThreads ||
      kDynamicSharedBytes > 0xffff0000u || dim == 0u || dim % paged_attention_kHeadDimAlign != 0u || dim > kMaxHeadDim ||
      nkv == 0u || p.block_size == 0u)
    return;
  const uint hpc = nq / gridDim.x;
  const uint group = nq / nkv;
  if (hpc == 0u || hpc > kMaxHeads || hpc * gridDim.x != nq || group * nkv != nq ||
      group % hpc != 0u)
    return;
  const uint splits = PA_NUM_SPLITS;
#if PA_MODE != PA_ONE_PASS
  if (splits == 0u || splits > 65535u || gridDim.z != splits) return;
#endif
#if PA_MODE == PA_SPLIT_MERGE
  if (uint64_t(p.counters) == 0ul) return;
#endif
  PaGeom gm;
  gm.seq = blockIdx.y;
  gm.z = blockIdx.z;
  gm.hpc = hpc;
  gm.h0 = blockIdx.x * hpc;
  gm.dim = dim;
  gm.num_q_heads = nq;
  gm.num_splits = splits;
  const uint kv_head = gm.h0 / group;

  // The window, clamped to the block table's capacity, and split z's part
  // of it (sparkrt/contract/split_kv.h).
  const uint64_t capacity = uint64_t(p.max_blocks_per_seq) * p.block_size;
  const int len = I32Ptr(p.seq_lens).v[gm.seq];
  const uint t1 = len <= 0 ? 0u : uint(min(uint64_t(len), capacity));
#if PA_MODE == PA_ONE_PASS
  const TokenRange range = token_range(t1, p.sliding_window, 0u, 0u);
#else
  const TokenRange range = token_range(t1, p.sliding_window, splits, gm.z);
#endif
  gm.lo = range.t0;
  gm.hi = range.t1;

  const uint elem_bytes = PA_FP8 != 0 ? 1u : 2u;
  gm.block_size = p.block_size;
  gm.block_shift = (p.block_size & (p.block_size - 1u)) == 0u ? uint(findLSB(p.block_size)) : 32u;
  gm.q_stride = p.q_stride;
  gm.q = uint64_t(p.q);
  gm.k_cache = uint64_t(p.k_cache);
  gm.v_cache = uint64_t(p.v_cache);
  gm.table = uint64_t(p.block_tables) + 4ul * uint64_t(gm.seq) * p.max_blocks_per_seq;
  gm.row_bytes = uint64_t(nkv) * dim * elem_bytes;
  gm.head_bytes = uint64_t(kv_head) * dim * elem_bytes;
  const float kLog2e = 1.4426950408889634;
#if PA_FP8
  gm.block_bytes = p.cache_stride;
  gm.q_scale = p.inv_sqrt_d * kLog2e * p.k_scale * kFp8Unit;
  gm.v_scale = p.v_scale * kFp8Unit;
#else
  gm.block_bytes = uint64_t(p.block_size) * gm.row_bytes;
  gm.q_scale = p.inv_sqrt_d * kLog2e;
  gm.v_scale = 1.0;
#endif
#if PA_MODE == PA_ONE_PASS || PA_MODE == PA_SPLIT_MERGE
  gm.out_at = uint64_t(p.out_);
#endif
#if PA_MODE != PA_ONE_PASS
  gm.part_acc = uint64_t(p.part_acc);
  gm.part_ml = uint64_t(p.part_ml);
#endif

  if (hpc == 1u)
    decode_ht1(gm);
  else if (hpc == 2u)
    decode_ht2(gm);
  else
    decode_ht4(gm);

#if PA_MODE == PA_SPLIT_MERGE
  // Every thread's partials before thread 0's release; its acquire, if
  // last, before every thread's reads.
  controlBarrier(gl_ScopeWorkgroup, gl_ScopeWorkgroup,
                 gl_StorageSemanticsBuffer | gl_StorageSemanticsShared, gl_SemanticsAcquireRelease);
  if (tid == 0u) {
    const uint64_t counter =
        uint64_t(p.counters) + 4ul * (uint64_t(gm.seq) * gridDim.x + blockIdx.x);
    const uint ticket = atomicAdd(U32Ptr(counter).v[0], 1u, gl_ScopeQueueFamily,
                                  gl_StorageSemanticsBuffer, gl_SemanticsAcquireRelease);
    last_s = ticket == splits - 1u ? 1u : 0u;
    // Every split has arrived: the counter is free for the next launch.
    if (ticket == splits - 1u)
      atomicStore(U32Ptr(counter).v[0], 0u, gl_ScopeQueueFamily, gl_StorageSemanticsBuffer,
                  gl_SemanticsRelaxed);
  }
  controlBarrier(gl_ScopeWorkgroup, gl_ScopeWorkgroup,
                 gl_StorageSemanticsBuffer | gl_StorageSemanticsShared, gl_SemanticsAcquireRelease);
  if (last_s == 0u) return;
  merge_splits(gm.part_acc, gm.part_ml, gm.out_at, uint64_t(gm.seq) * nq + gm.h0, hpc, splits, dim);
#endif
}

#else  // PA_MODE == PA_COMBINE

void main() {
  if (gl_WorkGroupSize.x * gl_WorkGroupSize.y * gl_WorkGroupSize.z != kThreads ||
      kDynamicSharedBytes > 0xffff0000u || p.num_splits == 0u || p.head_dim == 0u ||
      gridDim.x != p.num_q_heads)
    return;
  merge_splits(uint64_t(p.part_acc), uint64_t(p.part_ml), uint64_t(p.out_),
               uint64_t(blockIdx.y) * p.num_q_heads + blockIdx.x, 1u, p.num_splits, p.head_dim);
}

#endif  // PA_MODE
#endif  // SPARKRT_PAGED_ATTENTION_GLSL_
