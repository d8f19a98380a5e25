// The paged decode attention kernels (docs/kernels.md, "Module
// paged_attention"): one workgroup per (hpc query heads of one KV head,
// sequence, split), 256 threads. The entry file declares the push-constant
// block `p` with the contract's parameters, then defines:
//
//   PA_FP8          1: fp8 E4M3 caches with k_scale, v_scale, cache_stride
//   PA_MODE         PA_ONE_PASS, PA_SPLIT or PA_SPLIT_MERGE
//
// and includes this file. Its tokens are taken 32 at a time: eight lanes
// share a token's dot products (each lane every eighth word of the K row),
// each (head, token) then its score and weight of an online softmax in base
// 2, and each thread adds the weighted V rows of some of the chunk's tokens
// into two columns of every head (one load of a V pair for all the heads);
// the thread groups' sums meet at the end. Nothing assumes a subgroup size:
// threads meet in shared memory.
#ifndef SPARKRT_PAGED_DECODE_GLSL_
#define SPARKRT_PAGED_DECODE_GLSL_

#define PA_ONE_PASS 0
#define PA_SPLIT 1
#define PA_SPLIT_MERGE 2

layout(constant_id = 3) const uint kDynamicSharedBytes = 0;  // staging; this kernel needs none

// Partials another workgroup merges: written and read through coherent
// references, ordered by memoryBarrierBuffer around the counter's atomic.
layout(buffer_reference, scalar, buffer_reference_align = 4) coherent buffer CF32Ptr { float v[]; };
layout(buffer_reference, scalar, buffer_reference_align = 4) coherent buffer CU32Ptr { uint v[]; };

// Element `i` of an f32 array at `base`, through a coherent reference (the
// indices are 64-bit; GLSL indexes with 32).
float load_partial(uint64_t base, uint64_t i) { return CF32Ptr(base + 4ul * i).v[0]; }
void store_partial(uint64_t base, uint64_t i, float v) { CF32Ptr(base + 4ul * i).v[0] = v; }

const uint kThreads = 256;
const uint kLanes = 8;                   // threads per token's dot product
const uint kChunk = kThreads / kLanes;   // tokens per step
const uint kMaxHeads = 8;                // query heads a workgroup serves
const uint kMaxHeadDim = 256;
const float kLog2e = 1.4426950408889634;
const float kNegInf = -1.0 / 0.0;

// q of the heads at [0, kPartials), the lanes' partial dot products at
// [kPartials, ...); at the end, the thread groups' V sums (at most 512 a head).
const uint kPartials = kMaxHeads * kMaxHeadDim;
shared float smem[2 * kMaxHeads * kMaxHeadDim];
shared float weight_s[kMaxHeads][kChunk];  // a chunk's scores, then 2^(x - m)
shared float scale_s[kMaxHeads];           // 2^(m_old - m_new) for the running sums
shared uint64_t v_row_s[kChunk];           // the chunk's V rows, 0 where not read
shared float m_s[kMaxHeads];
shared float l_s[kMaxHeads];
shared uint last_s;

#if PA_FP8
#define PA_K_SCALE p.k_scale
#define PA_V_SCALE p.v_scale
#define PA_CACHE_STRIDE p.cache_stride
#else
#define PA_K_SCALE 1.0
#define PA_V_SCALE 1.0
#define PA_CACHE_STRIDE (uint64_t(p.block_size) * p.num_kv_heads * p.head_dim)
#endif

#if PA_MODE == PA_ONE_PASS
#define PA_NUM_SPLITS 1u
#else
#define PA_NUM_SPLITS p.num_splits
#endif

// The element address of (token's cache row, kv head) in a cache, or 0 when
// the token's block id is negative (outside the contract: not read).
uint64_t row_address(uint64_t cache, uint seq, uint t, uint kv_head) {
  const int block = I32Ptr(uint64_t(p.block_tables) +
                           4ul * (uint64_t(seq) * p.max_blocks_per_seq + t / p.block_size)).v[0];
  if (block < 0) return 0ul;
  const uint64_t elem = uint64_t(block) * PA_CACHE_STRIDE +
                        (uint64_t(t % p.block_size) * p.num_kv_heads + kv_head) * p.head_dim;
  return cache + elem * (PA_FP8 != 0 ? 1ul : 2ul);
}

// Four fp8 (one word) or two bf16 (one word) of a row, as f32.
#if PA_FP8
vec4 cache_word(uint w) {
  return vec4(fp8_e4m3_to_f32(w & 0xffu), fp8_e4m3_to_f32((w >> 8) & 0xffu),
              fp8_e4m3_to_f32((w >> 16) & 0xffu), fp8_e4m3_to_f32(w >> 24));
}
const uint kElemsPerWord = 4;
#else
vec2 cache_word(uint w) { return vec2(bf16_to_f32(w & 0xffffu), bf16_to_f32(w >> 16)); }
const uint kElemsPerWord = 2;
#endif

float cache_elem(uint64_t row, uint d) {
#if PA_FP8
  return fp8_e4m3_to_f32(uint(U8Ptr(row + d).v[0]));
#else
  return bf16_to_f32(uint(U16Ptr(row + 2ul * d).v[0]));
#endif
}

void main() {
  const uint tid = gl_LocalInvocationIndex;
  const uint nq = p.num_q_heads, nkv = p.num_kv_heads, dim = p.head_dim;
  // A launch outside the geometry rules returns without writing.
  if (gl_WorkGroupSize.x * gl_WorkGroupSize.y * gl_WorkGroupSize.z != kThreads ||
      kDynamicSharedBytes > 0xffff0000u || nkv == 0u || nq % nkv != 0u || dim == 0u ||
      dim > kMaxHeadDim || dim % 8u != 0u || p.block_size == 0u)
    return;
  const uint hpc = nq / gridDim.x;
  const uint group = nq / nkv;
  if (hpc == 0u || hpc > kMaxHeads || hpc * gridDim.x != nq || group % hpc != 0u) return;
  const uint splits = PA_NUM_SPLITS;
  if (splits == 0u || gridDim.z != splits) return;
  const uint seq = blockIdx.y, z = blockIdx.z;
  const uint h0 = blockIdx.x * hpc;
  const uint kv_head = h0 / group;

  // The window [t0, t1), clamped to the block table's capacity, and this
  // split's part of it.
  const uint capacity = p.max_blocks_per_seq * p.block_size;
  const int len = I32Ptr(p.seq_lens).v[seq];
  const uint t1 = uint(clamp(len, 0, int(min(capacity, 0x7fffffffu))));
  const uint t0 = p.sliding_window > 0u && p.sliding_window < t1 ? t1 - p.sliding_window : 0u;
  uint lo = t0, hi = t1;
#if PA_MODE != PA_ONE_PASS
  {
    const uint a = t0 / 16u * 16u;
    const uint per = 16u * ((t1 - a + 16u * splits - 1u) / (16u * splits));
    lo = clamp(a + z * per, t0, t1);
    hi = clamp(a + (z + 1u) * per, t0, t1);
    if (t1 <= t0) lo = hi = t1;
  }
#endif

  // q of the workgroup's heads, scaled so that a dot product is x_t, the
  // score in base 2: inv_sqrt_d * log2(e) * k_scale * (q . K_raw).
  const float q_scale = p.inv_sqrt_d * kLog2e * PA_K_SCALE;
  for (uint i = tid; i < hpc * dim; i += kThreads) {
    const uint hh = i / dim, d = i % dim;
    const uint64_t at = uint64_t(seq) * p.q_stride + uint64_t(h0 + hh) * dim + d;
    smem[hh * kMaxHeadDim + d] = q_scale * bf16_to_f32(uint(U16Ptr(uint64_t(p.q) + 2ul * at).v[0]));
  }
  if (tid < kMaxHeads) {
    m_s[tid] = kNegInf;
    l_s[tid] = 0.0;
  }
  // V: thread (group g, column c) sums columns 2c, 2c + 1 of every head over
  // the chunk's tokens g, g + groups, ...: one load of a V pair serves all
  // the workgroup's heads.
  const uint columns = dim / 2u;
  const uint groups = kThreads / columns;
  const uint column = tid % columns, g = tid / columns;
  float acc[2 * kMaxHeads];
  for (uint i = 0u; i < 2u * kMaxHeads; ++i) acc[i] = 0.0;
  barrier();

  const uint lane = tid % kLanes, row = tid / kLanes;
  const uint words = dim / kElemsPerWord;
  const uint sh = tid / kChunk, sr = tid % kChunk;  // (head, token) of the softmax steps
  for (uint base = lo / kChunk * kChunk; base < hi; base += kChunk) {
    // Scores: eight lanes a token, each every eighth word of its K row.
    const uint t = base + row;
    float dots[kMaxHeads];
    for (uint hh = 0u; hh < kMaxHeads; ++hh) dots[hh] = 0.0;
    const uint64_t k_row = t >= lo && t < hi ? row_address(uint64_t(p.k_cache), seq, t, kv_head) : 0ul;
    if (k_row != 0ul) {
      for (uint w = lane; w < words; w += kLanes) {
        const uint word = U32Ptr(k_row + 4ul * w).v[0];
#if PA_FP8
        const vec4 k = cache_word(word);
        for (uint hh = 0u; hh < hpc; ++hh) {
          const uint q0 = hh * kMaxHeadDim + 4u * w;
          dots[hh] += smem[q0] * k.x + smem[q0 + 1u] * k.y + smem[q0 + 2u] * k.z + smem[q0 + 3u] * k.w;
        }
#else
        const vec2 k = cache_word(word);
        for (uint hh = 0u; hh < hpc; ++hh) {
          const uint q0 = hh * kMaxHeadDim + 2u * w;
          dots[hh] += smem[q0] * k.x + smem[q0 + 1u] * k.y;
        }
#endif
      }
    }
    for (uint hh = 0u; hh < hpc; ++hh) smem[kPartials + hh * kThreads + tid] = dots[hh];
    if (lane == 0u)
      v_row_s[row] = k_row != 0ul ? row_address(uint64_t(p.v_cache), seq, t, kv_head) : 0ul;
    barrier();
    // The online softmax: each (head, token) its score, each head its new
    // maximum, each (head, token) its weight.
    if (sh < hpc) {
      float x = 0.0;
      for (uint l = 0u; l < kLanes; ++l) x += smem[kPartials + sh * kThreads + sr * kLanes + l];
      weight_s[sh][sr] = v_row_s[sr] != 0ul ? x : kNegInf;  // a token read
    }
    barrier();
    if (tid < hpc) {
      float m_chunk = kNegInf;
      for (uint r = 0u; r < kChunk; ++r) m_chunk = max(m_chunk, weight_s[tid][r]);
      const float m_old = m_s[tid], m_new = max(m_old, m_chunk);
      scale_s[tid] = m_new == kNegInf ? 1.0 : (m_old == kNegInf ? 0.0 : exp2(m_old - m_new));
      m_s[tid] = m_new;
    }
    barrier();
    if (sh < hpc) {
      const float x = weight_s[sh][sr];
      weight_s[sh][sr] = x == kNegInf ? 0.0 : exp2(x - m_s[sh]);
    }
    barrier();
    if (tid < hpc) {
      float sum = 0.0;
      for (uint r = 0u; r < kChunk; ++r) sum += weight_s[tid][r];
      l_s[tid] = l_s[tid] * scale_s[tid] + sum;
    }
    if (g < groups) {
      for (uint hh = 0u; hh < hpc; ++hh) {
        acc[2u * hh] *= scale_s[hh];
        acc[2u * hh + 1u] *= scale_s[hh];
      }
      for (uint r = g; r < kChunk; r += groups) {
        const uint64_t v_row = v_row_s[r];
        if (v_row == 0ul) continue;
#if PA_FP8
        const uint pair = uint(U16Ptr(v_row + 2ul * column).v[0]);
        const vec2 v = vec2(fp8_e4m3_to_f32(pair & 0xffu), fp8_e4m3_to_f32(pair >> 8));
#else
        const vec2 v = cache_word(U32Ptr(v_row + 4ul * column).v[0]);
#endif
        for (uint hh = 0u; hh < hpc; ++hh) {
          const float w = weight_s[hh][r];
          acc[2u * hh] += w * v.x;
          acc[2u * hh + 1u] += w * v.y;
        }
      }
    }
    barrier();
  }

  // The groups' sums meet in shared memory (q and the partials are done).
  if (g < groups)
    for (uint hh = 0u; hh < hpc; ++hh) {
      smem[(g * hpc + hh) * dim + 2u * column] = acc[2u * hh];
      smem[(g * hpc + hh) * dim + 2u * column + 1u] = acc[2u * hh + 1u];
    }
  barrier();
  const float v_scale = PA_V_SCALE;
#if PA_MODE != PA_ONE_PASS
  const uint64_t part_acc = uint64_t(p.part_acc), part_ml = uint64_t(p.part_ml);
#endif
  for (uint i = tid; i < hpc * dim; i += kThreads) {
    const uint hh = i / dim, d = i % dim;
    float total = 0.0;
    for (uint gg = 0u; gg < groups; ++gg) total += smem[(gg * hpc + hh) * dim + d];
    const float l = l_s[hh];
#if PA_MODE == PA_ONE_PASS
    const uint64_t at = (uint64_t(seq) * nq + h0 + hh) * dim + d;
    U16Ptr(uint64_t(p.out_) + 2ul * at).v[0] = uint16_t(f32_to_bf16(l > 0.0 ? total * v_scale / l : 0.0));
#else
    // Partials: part = (seq * nq + h) * splits + z.
    const uint64_t part = (uint64_t(seq) * nq + h0 + hh) * splits + z;
    store_partial(part_acc, part * dim + d, l > 0.0 ? total * v_scale : 0.0);
#endif
  }
#if PA_MODE != PA_ONE_PASS
  if (tid < hpc) {
    const uint64_t part = (uint64_t(seq) * nq + h0 + tid) * splits + z;
    const bool empty = !(l_s[tid] > 0.0);
    store_partial(part_ml, 2ul * part, empty ? kNegInf : m_s[tid]);
    store_partial(part_ml, 2ul * part + 1ul, empty ? 0.0 : l_s[tid]);
  }
#if PA_MODE == PA_SPLIT_MERGE
  // The last workgroup of (sequence, head group) to finish merges.
  memoryBarrierBuffer();
  barrier();
  if (tid == 0u) {
    CU32Ptr counter = CU32Ptr(uint64_t(p.counters) + 4ul * (uint64_t(seq) * gridDim.x + blockIdx.x));
    last_s = atomicAdd(counter.v[0], 1u) == splits - 1u ? 1u : 0u;
  }
  barrier();
  if (last_s == 0u) return;
  memoryBarrierBuffer();
  for (uint i = tid; i < hpc * dim; i += kThreads) {
    const uint hh = i / dim, d = i % dim;
    const uint64_t r = uint64_t(seq) * nq + h0 + hh;
    float m_max = kNegInf;
    for (uint zz = 0u; zz < splits; ++zz)
      if (load_partial(part_ml, 2ul * (r * splits + zz) + 1ul) > 0.0)
        m_max = max(m_max, load_partial(part_ml, 2ul * (r * splits + zz)));
    float num = 0.0, den = 0.0;
    for (uint zz = 0u; zz < splits; ++zz) {
      const uint64_t part = r * splits + zz;
      const float l = load_partial(part_ml, 2ul * part + 1ul);
      if (!(l > 0.0)) continue;
      const float w = exp2(load_partial(part_ml, 2ul * part) - m_max);
      num += w * load_partial(part_acc, part * dim + d);
      den += w * l;
    }
    U16Ptr(uint64_t(p.out_) + 2ul * (r * dim + d)).v[0] =
        uint16_t(f32_to_bf16(den > 0.0 ? num / den : 0.0));
  }
  if (tid == 0u)
    atomicExchange(CU32Ptr(uint64_t(p.counters) + 4ul * (uint64_t(seq) * gridDim.x + blockIdx.x)).v[0], 0u);
#endif
#endif
}

#endif  // SPARKRT_PAGED_DECODE_GLSL_
