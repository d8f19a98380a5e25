// One instance of the decode loop of paged_attention.glsl, for PA_HT
// query heads a thread (1, 2 or 4), named PA_DECODE_FN; that file includes
// this one once per instance, so that every array below has a compile-time
// size and lives in registers. The layout of the work is described there.

void PA_DECODE_FN(in PaGeom gm) {
  const uint HT = PA_HT;
  const uint tid = gl_LocalInvocationIndex;
  const uint C = gm.dim / 8u;                    // chunks of 8 elements a row
  const uint G = (gm.hpc + HT - 1u) / HT;        // head groups a token
  const uint HP = G * HT;                        // heads, padding included
  const uint LPR = G * C;                        // lanes a token
  const uint TS = min(kThreads / LPR, kThreads / HP);  // token slots
  const uint N = kPasses * TS;                   // tokens a tile
  // Loader role: slot j, head group g, chunk c (elements 8c .. 8c + 7).
  const uint j = tid / LPR, g = (tid % LPR) / C, c = tid % C;
  const bool loader = j < TS;
  const uint h_first = g * HT;                   // the loader's first head
  // Reducer role: slot rj, head rh.
  const bool reducer = tid < TS * HP;
  const uint rj = tid / HP, rh = tid % HP;

  // q of the loader's heads and chunk, scaled to give scores in base 2.
  float q[HT * 8u];
  [[unroll]] for (uint hh = 0u; hh < HT; ++hh) {
    const uint h = h_first + hh;
    const bool on = loader && h < gm.hpc;
    const uint64_t at = gm.q + 2ul * (uint64_t(gm.seq) * gm.q_stride +
                                      uint64_t(gm.h0 + (on ? h : 0u)) * gm.dim + 8u * c);
    [[unroll]] for (uint i = 0u; i < 8u; ++i)
      q[hh * 8u + i] = on ? gm.q_scale * bf16_to_f32(uint(U16Ptr(at).v[kPerm[i]])) : 0.0;
  }
  float acc[HT * 8u];
  [[unroll]] for (uint i = 0u; i < HT * 8u; ++i) acc[i] = 0.0;
  float m_run = kLow, l_run = 0.0;  // the reducer's slot and head

  // Loads of this tile in flight (K, V), the byte offsets of its rows in the
  // caches, and the block ids of the tile after it.
  PaChunk kr[kPasses], vr[kPasses];
  uint64_t off[kPasses];
  int bid[kPasses];
  const uint chunk_off = c * kChunkBytes;
  uint start = gm.lo;
  block_ids(gm, loader, start, j, TS, bid);
  row_offsets(gm, start, j, TS, chunk_off, bid, off);
  [[unroll]] for (uint p = 0u; p < kPasses; ++p) {
    kr[p] = load_chunk(gm.k_cache, off[p]);
    vr[p] = load_chunk(gm.v_cache, off[p]);
  }
  block_ids(gm, loader, start + N, j, TS, bid);

  while (start < gm.hi) {
    const uint next = start + N;
    // Each loader's share of its token's dot products, one per head.
    if (loader) {
      [[unroll]] for (uint p = 0u; p < kPasses; ++p) {
        float k[8];
        chunk_to_f32(kr[p], k);
        const uint base = ((p * TS + j) * HP + h_first) * C + c;
        [[unroll]] for (uint hh = 0u; hh < HT; ++hh) {
          float s = 0.0;
          [[unroll]] for (uint i = 0u; i < 8u; ++i) s += q[hh * 8u + i] * k[i];
          red_set(base + hh * C, s);
        }
      }
    }
    // The next tile's K rows are read while this one finishes.
    row_offsets(gm, next, j, TS, chunk_off, bid, off);
    [[unroll]] for (uint p = 0u; p < kPasses; ++p) kr[p] = load_chunk(gm.k_cache, off[p]);
    block_ids(gm, loader, next + N, j, TS, bid);
    pa_barrier();
    // Scores, and the online softmax of each (slot, head).
    if (reducer) {
      float x[kPasses];
      bool valid[kPasses];
      float m_new = m_run;
      [[unroll]] for (uint p = 0u; p < kPasses; ++p) {
        const uint n = p * TS + rj;
        valid[p] = start + n < gm.hi && rh < gm.hpc;
        x[p] = valid[p] ? red_sum(n * HP + rh, C) : kLow;
        m_new = max(m_new, x[p]);
      }
      // 1 while the slot's max stays; (about) 0 at its first token, where
      // its sums are still 0.
      const float alpha = exp2(m_run - m_new);
      float sum = 0.0;
      [[unroll]] for (uint p = 0u; p < kPasses; ++p) {
        const float w = valid[p] ? exp2(x[p] - m_new) : 0.0;
        weight_s[(p * TS + rj) * HP + rh] = w;
        sum += w;
      }
      l_run = l_run * alpha + sum;
      m_run = m_new;
      alpha_s[tid] = alpha;
    }
    pa_barrier();
    // The weighted V rows into the loader's outputs.
    if (loader) {
      float a[HT];
      bool rescale = false;
      [[unroll]] for (uint hh = 0u; hh < HT; ++hh) {
        a[hh] = alpha_s[j * HP + h_first + hh];
        rescale = rescale || a[hh] != 1.0;
      }
      if (rescale)
        [[unroll]] for (uint i = 0u; i < HT * 8u; ++i) acc[i] *= a[i / 8u];
      [[unroll]] for (uint p = 0u; p < kPasses; ++p) {
        float v[8];
        chunk_to_f32(vr[p], v);
        const uint base = (p * TS + j) * HP + h_first;
        [[unroll]] for (uint hh = 0u; hh < HT; ++hh) {
          const float w = weight_s[base + hh];
          [[unroll]] for (uint i = 0u; i < 8u; ++i) acc[hh * 8u + i] += w * v[i];
        }
      }
    }
    [[unroll]] for (uint p = 0u; p < kPasses; ++p) vr[p] = load_chunk(gm.v_cache, off[p]);
    start = next;
  }

  // The slots' (max, sum) pairs merge as splits do: slot j's weight is
  // 2^(m_j - M) over the slots with tokens, M their largest max.
  if (reducer) {
    slot_m_s[tid] = m_run;
    slot_l_s[tid] = l_run;
  }
  pa_barrier();
  if (reducer) {
    float m = kLow;
    for (uint s = 0u; s < TS; ++s)
      if (slot_l_s[s * HP + rh] > 0.0) m = max(m, slot_m_s[s * HP + rh]);
    alpha_s[tid] = l_run > 0.0 ? exp2(m_run - m) : 0.0;
    if (rj == 0u) {
      float l = 0.0;
      for (uint s = 0u; s < TS; ++s) {
        const float ls = slot_l_s[s * HP + rh];
        if (ls > 0.0) l += exp2(slot_m_s[s * HP + rh] - m) * ls;
      }
      head_m_s[rh] = m;
      head_l_s[rh] = l;
    }
  }
  pa_barrier();
  if (loader)
    [[unroll]] for (uint i = 0u; i < HT * 8u; ++i) acc[i] *= alpha_s[j * HP + h_first + i / 8u];
  // A tree over the slots into slot 0, through the partials' memory: the
  // slots [h, 2h) add into [0, h), h halving from the largest power of two
  // below TS.
  uint half_n = 1u;
  while (2u * half_n < TS) half_n *= 2u;
  for (; TS > 1u && half_n > 0u; half_n /= 2u) {
    if (loader && j >= half_n && j < 2u * half_n) {
      const uint base = ((j - half_n) * HP + h_first) * gm.dim + 8u * c;
      [[unroll]] for (uint hh = 0u; hh < HT; ++hh)
        [[unroll]] for (uint i = 0u; i < 8u; ++i) red_set(base + hh * gm.dim + i, acc[hh * 8u + i]);
    }
    pa_barrier();
    if (loader && j < half_n && j + half_n < TS) {
      const uint base = (j * HP + h_first) * gm.dim + 8u * c;
      [[unroll]] for (uint hh = 0u; hh < HT; ++hh)
        [[unroll]] for (uint i = 0u; i < 8u; ++i) acc[hh * 8u + i] += red_get(base + hh * gm.dim + i);
    }
    pa_barrier();
  }

  if (loader && j == 0u) {
    [[unroll]] for (uint hh = 0u; hh < HT; ++hh) {
      const uint h = h_first + hh;
      if (h >= gm.hpc) break;
      const float l = head_l_s[h];
      const uint64_t row = uint64_t(gm.seq) * gm.num_q_heads + gm.h0 + h;
#if PA_MODE == PA_ONE_PASS
      const float scale = l > 0.0 ? gm.v_scale / l : 0.0;
      const uint64_t at = gm.out_at + 2ul * (row * gm.dim + 8u * c);
      [[unroll]] for (uint i = 0u; i < 8u; ++i)
        U16Ptr(at).v[kPerm[i]] = uint16_t(f32_to_bf16(acc[hh * 8u + i] * scale));
#else
      const float scale = l > 0.0 ? gm.v_scale : 0.0;
      const uint64_t part = row * gm.num_splits + gm.z;
      const uint64_t at = gm.part_acc + 4ul * (part * gm.dim + 8u * c);
      [[unroll]] for (uint i = 0u; i < 8u; ++i)
        store_partial(at + 4u * kPerm[i], acc[hh * 8u + i] * scale);
      if (c == 0u) {
        if (l > 0.0)
          store_partial(gm.part_ml + 8ul * part, head_m_s[h]);
        else
          store_partial_bits(gm.part_ml + 8ul * part, kMinusInfBits);
        store_partial(gm.part_ml + 8ul * part + 4ul, l);
      }
#endif
    }
  }
}
