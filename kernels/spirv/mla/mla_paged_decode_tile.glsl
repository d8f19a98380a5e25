// One instance of the decode loop of mla_paged_decode.glsl, for rows of at
// most 4 * MLA_MAX_VEC * 16 values and MLA_MAX_QUADS * 256 output dims,
// named MLA_DECODE_FN; that file includes this one once per instance, so
// that q and the accumulators have compile-time sizes and live in
// registers. The layout of the work is described there.

// The weighted V rows of a tile into the first NH heads' accumulators.
#define MLA_V_TILE(NH)                                                              \
  for (uint t = 0u; t < T; ++t) {                                                   \
    const vec4 w = weight_s[t * 4u + hl];                                           \
    const uint base = t * g.pitch4 + ql;                                            \
    [[unroll]] for (uint k = 0u; k < MLA_MAX_QUADS; ++k) {                          \
      if (ql + 64u * k < nquads) {                                                  \
        const vec4 v = stage_s[base + 64u * k];                                     \
        [[unroll]] for (uint j = 0u; j < NH; ++j) acc[j][k] = fma(vec4(w[j]), v, acc[j][k]); \
      }                                                                             \
    }                                                                               \
  }

void MLA_DECODE_FN(in MlaGeom g) {
  const uint tid = gl_LocalInvocationIndex;
  uint nt = gl_WorkGroupSize.x;  // every thread stages; the first kThreads compute
                                 // (a variable: see main())
  const bool computes = tid < kThreads;
  const uint T = g.T;

  // Staging: unit c = tid + nt * m of a tile is chunk c / T of token c % T
  // (none past the row's chunks), the same every tile. Neighbouring threads
  // take the same chunk of neighbouring rows, whose staged copies start 4
  // banks apart: their 16-byte stores do not conflict.
  const uint cpr_k = (g.dk + 15u) / 16u, cpr_v = (g.dv + 15u) / 16u;
  uint k_tok[kMaxStaged], k_chunk[kMaxStaged], v_tok[kMaxStaged], v_chunk[kMaxStaged];
  [[unroll]] for (uint m = 0u; m < kMaxStaged; ++m) {
    const uint c = tid + nt * m;
    k_chunk[m] = c / T;
    k_tok[m] = k_chunk[m] < cpr_k ? c % T : kMaxTile;  // kMaxTile: none
    v_chunk[m] = c / T;
    v_tok[m] = v_chunk[m] < cpr_v ? c % T : kMaxTile;
  }

  // Scores: thread (slice s, r); r is head h of token lane `lane` (16 / hp
  // lanes, hp = hc rounded up to a power of two).
  const uint s = (tid >> 4u) & (kSlices - 1u), r = tid & (kHeads - 1u);
  uint hp_log = 0u;
  while ((1u << hp_log) < g.hc) ++hp_log;
  const uint h = r & ((1u << hp_log) - 1u), lane = r >> hp_log, lanes = kHeads >> hp_log;
  const uint nvec = (g.dq + 3u) / 4u;  // q's 4-dim groups (zeros past q_head_dim)
  // A token's shares, padded by hp floats: the token lanes' stores (and the
  // softmax threads' loads) fall on distinct banks.
  const uint part_pitch = kSlices * kHeads + (1u << hp_log);
  vec4 q[MLA_MAX_VEC];
  {
    const uint64_t qrow = g.q + 2ul * ((uint64_t(g.seq) * g.num_q_heads + g.h0 + h) * g.dq);
    [[unroll]] for (uint i = 0u; i < MLA_MAX_VEC; ++i) {
      const uint vi = s + kSlices * i;
      vec4 x = vec4(0.0);
      if (computes && h < g.hc && vi < nvec)
        [[unroll]] for (uint e = 0u; e < 4u; ++e)
          if (4u * vi + e < g.dq) x[e] = bf16_to_f32(uint(U16Ptr(qrow + 2ul * (4u * vi + e)).v[0]));
      q[i] = x;
    }
  }

  // Output: thread (head group hl, quad lane ql) owns heads hl + 4i < hc
  // (nh of them) and dims 4 (ql + 64k) .. + 3.
  const uint hl = (tid >> 3u) & 3u, ql = (tid & 7u) | ((tid >> 5u) << 3u);
  const uint nh = g.hc > hl ? (g.hc - hl + 3u) / 4u : 0u;
  const uint nquads = (g.dv + 3u) / 4u;
  // Heads a thread's loop takes (the workgroup's alike; past nh their
  // weights are 0): a compile-time count, no per-head test in the loop.
  const uint vh = g.hc > 8u ? 4u : g.hc > 4u ? 2u : 1u;
  vec4 acc[4][MLA_MAX_QUADS];
  [[unroll]] for (uint i = 0u; i < 4u; ++i)
    [[unroll]] for (uint k = 0u; k < MLA_MAX_QUADS; ++k) acc[i][k] = vec4(0.0);

  // Softmax: thread (token st, head sh) for tid < T * hp keeps its head's
  // running max (every st alike); st = 0 also the running sum. Heads past
  // hc keep weight 0 and factor 1.
  const bool softmax = tid < (T << hp_log);
  const uint st = tid >> hp_log, sh = tid & ((1u << hp_log) - 1u);
  float m_run = kLow, l_run = 0.0;
  if (tid < kMaxTile * 4u) weight_s[tid] = vec4(0.0);
  if (tid < 4u) alpha_s[tid] = vec4(1.0);

  // The row addresses of tiles 0 and 1, the block ids of tile 2 (thread
  // tid < T: token tid of a tile), then tile 0's loads.
  const uint ntiles = (g.u1 - g.u0 + T - 1u) / T;
  int bid = 0;
  if (tid < T) {
    [[unroll]] for (uint tile = 0u; tile < 2u; ++tile) {
      const uint at = (tile * kMaxTile + tid) * 4u;
      const uint64_t u = uint64_t(g.u0) + tile * T + tid;
      token_rows(g, u, token_block(g, u), src_s[at], src_s[at + 1u], src_s[at + 2u],
                 src_s[at + 3u]);
    }
    bid = token_block(g, uint64_t(g.u0) + 2u * T + tid);
  }
  mla_decode_barrier();
  uvec4 kraw[kMaxStaged], vraw[kMaxStaged];
  [[unroll]] for (uint m = 0u; m < kMaxStaged; ++m) {
    const uint at = min(k_tok[m], T - 1u) * 4u;
    kraw[m] = k_tok[m] < T ? load_chunk(src_s[at], src_s[at + 1u], k_chunk[m], g.dk, g.aligned)
                           : uvec4(0u);
    const uint vat = min(v_tok[m], T - 1u) * 4u;
    vraw[m] = g.separate_v && v_tok[m] < T
                  ? load_chunk(src_s[vat + 2u], src_s[vat + 3u], v_chunk[m], g.dv, g.aligned)
                  : uvec4(0u);
  }

  for (uint i = 0u; i < ntiles; ++i) {
    const uint slot = i % 3u, next = (i + 1u) % 3u, later = (i + 2u) % 3u;
    // The last tile's reads of stage_s are done; tile i + 1's rows are known.
    mla_decode_barrier();
    [[unroll]] for (uint m = 0u; m < kMaxStaged; ++m)
      if (k_tok[m] < T) stage_chunk(k_tok[m] * g.pitch4 + 4u * k_chunk[m], kraw[m]);
    if (tid < T) {
      const uint at = (later * kMaxTile + tid) * 4u;
      const uint64_t u = uint64_t(g.u0) + uint64_t(i + 2u) * T + tid;
      token_rows(g, u, bid, src_s[at], src_s[at + 1u], src_s[at + 2u], src_s[at + 3u]);
      bid = token_block(g, u + T);  // used a tile from now
    }
    mla_decode_barrier();
    // Tile i + 1's K rows load while this one is used.
    [[unroll]] for (uint m = 0u; m < kMaxStaged; ++m) {
      const uint at = (next * kMaxTile + min(k_tok[m], T - 1u)) * 4u;
      kraw[m] = k_tok[m] < T ? load_chunk(src_s[at], src_s[at + 1u], k_chunk[m], g.dk, g.aligned)
                             : uvec4(0u);
    }
    // Each thread's shares of its tokens' dot products.
    if (computes && h < g.hc) {
      for (uint t = lane; t < T; t += lanes) {
        const uint base = t * g.pitch4 + s;
        vec4 d = vec4(0.0);
        [[unroll]] for (uint k = 0u; k < MLA_MAX_VEC; ++k)
          if (s + kSlices * k < nvec) d = fma(q[k], stage_s[base + kSlices * k], d);
        part_s[t * part_pitch + s * kHeads + h] = (d.x + d.y) + (d.z + d.w);
      }
    }
    mla_decode_barrier();
    // A separate V pool's rows take the K rows' place (the scores are taken).
    if (g.separate_v) {
      [[unroll]] for (uint m = 0u; m < kMaxStaged; ++m)
        if (v_tok[m] < T) stage_chunk(v_tok[m] * g.pitch4 + 4u * v_chunk[m], vraw[m]);
      [[unroll]] for (uint m = 0u; m < kMaxStaged; ++m) {
        const uint at = (next * kMaxTile + min(v_tok[m], T - 1u)) * 4u;
        vraw[m] = v_tok[m] < T
                      ? load_chunk(src_s[at + 2u], src_s[at + 3u], v_chunk[m], g.dv, g.aligned)
                      : uvec4(0u);
      }
    }
    // The scores (base 2); kLow for a token not read.
    if (softmax) {
      float x = kLow;
      if (sh < g.hc && src_s[(slot * kMaxTile + st) * 4u] != 0ul) {
        float sum = 0.0;
        [[unroll]] for (uint k = 0u; k < kSlices; ++k) sum += part_s[st * part_pitch + k * kHeads + sh];
        x = sum * g.score_scale;
      }
      score_s[st * kHeads + sh] = x;
    }
    mla_decode_barrier();
    // The online softmax of each head: the tile's weights, and the factor
    // of the head's running sums (about 0 at its first token, where they
    // are still 0).
    if (softmax) {
      float mt = kLow;
      for (uint t = 0u; t < T; ++t) mt = max(mt, score_s[t * kHeads + sh]);
      const float m_new = max(m_run, mt);
      const float x = score_s[st * kHeads + sh];
      weight_s[st * 4u + (sh & 3u)][sh >> 2u] = x > 0.5 * kLow ? exp2(x - m_new) : 0.0;
      if (st == 0u) {
        float sum = 0.0;
        for (uint t = 0u; t < T; ++t) {
          const float y = score_s[t * kHeads + sh];
          if (y > 0.5 * kLow) sum += exp2(y - m_new);
        }
        const float alpha = exp2(m_run - m_new);
        l_run = l_run * alpha + sum;
        alpha_s[sh & 3u][sh >> 2u] = alpha;
      }
      m_run = m_new;
    }
    mla_decode_barrier();
    // The weighted V rows into the outputs.
    if (computes) {
      const vec4 a = alpha_s[hl];
      if (a != vec4(1.0))
        [[unroll]] for (uint j = 0u; j < 4u; ++j)
          [[unroll]] for (uint k = 0u; k < MLA_MAX_QUADS; ++k) acc[j][k] *= a[j];
      if (vh == 4u) {
        MLA_V_TILE(4u)
      } else if (vh == 2u) {
        MLA_V_TILE(2u)
      } else {
        MLA_V_TILE(1u)
      }
    }
  }

  // Each head's output factor (its V unit over its softmax sum, with the
  // sink), and for a split its (max, sum): threads (0, sh).
  mla_decode_barrier();
  if (tid < g.hc) {
#if MLA_SPLIT
    const uint64_t ml =
        uint64_t(p.part_ml) + 8ul * ((uint64_t(g.seq) * g.num_q_heads + g.h0 + tid) * g.splits + g.z);
    U32Ptr(ml).v[0] = l_run > 0.0 ? floatBitsToUint(m_run) : kMinusInfBits;
    F32Ptr(ml).v[1] = l_run;
    const float factor = l_run > 0.0 ? g.v_unit : 0.0;
#else
    // The sink is one more logit in the denominator that carries no value.
#if MLA_NVFP4
    const bool has_sink = false;
    const float sink = kLow;
#else
    const bool has_sink = uint64_t(p.sinks) != 0ul;
    const float sink = has_sink ? F32Ptr(p.sinks).v[g.h0 + tid] * kLog2e : kLow;
#endif
    const float mm = max(m_run, sink);
    const float total = l_run * exp2(m_run - mm) + (has_sink ? exp2(sink - mm) : 0.0);
    const float factor = total > 0.0 ? g.v_unit * exp2(m_run - mm) / total : 0.0;
#endif
    alpha_s[tid & 3u][tid >> 2u] = factor;
  }
  mla_decode_barrier();
  if (computes) {
    const vec4 f = alpha_s[hl];
    [[unroll]] for (uint j = 0u; j < 4u; ++j) {
      if (j >= nh) break;
      const uint64_t row = uint64_t(g.seq) * g.num_q_heads + g.h0 + hl + 4u * j;
      [[unroll]] for (uint k = 0u; k < MLA_MAX_QUADS; ++k) {
        const uint quad = ql + 64u * k;
        if (quad >= nquads) continue;
        const vec4 o = acc[j][k] * f[j];
#if MLA_SPLIT
        const uint64_t at = uint64_t(p.part_acc) + 4ul * ((row * g.splits + g.z) * g.dv + 4u * quad);
        [[unroll]] for (uint e = 0u; e < 4u; ++e)
          if (4u * quad + e < g.dv) F32Ptr(at).v[e] = o[e];
#else
        const uint64_t at = uint64_t(p.o) + 2ul * (row * g.dv + 4u * quad);
        [[unroll]] for (uint e = 0u; e < 4u; ++e)
          if (4u * quad + e < g.dv) U16Ptr(at).v[e] = uint16_t(f32_to_bf16(o[e]));
#endif
      }
    }
  }
}

#undef MLA_V_TILE
