// One instance of the decode loop of turbo_paged_attention.glsl, for TPA_HT
// query heads a thread (1, 2 or 4), named TPA_DECODE_FN; that file includes
// this one once per instance, so that every array below has a compile-time
// size and lives in registers. The layout of the work is described there.

void TPA_DECODE_FN(in TpaGeom gm) {
  const uint HT = TPA_HT;
  const uint tid = gl_LocalInvocationIndex;
  const uint C = gm.dim / 8u;                    // chunks of 8 dims a row (8, 16, 32)
  const uint C4 = C / 4u;
  const uint G = (gm.hpc + HT - 1u) / HT;        // head groups a token
  const uint HP = G * HT;                        // heads, padding included
  const uint LPR = G * C;                        // lanes a token
  const uint TS = min(kThreads / LPR, kThreads / HP);  // token slots
  const uint N = kPasses * TS;                   // tokens a tile
  // Loader role: slot j, head group g, chunk c (dims 8c .. 8c + 7).
  const uint j = tid / LPR, g = (tid % LPR) / C, c = tid % C;
  const bool loader = j < TS;
  const uint h_first = g * HT;                   // the loader's first head
  // Reducer role: slot rj, head rh; the (slot, head) arrays of shared
  // memory (alpha_s, slot_m_s, slot_l_s) are [head][slot], indexed by tid.
  // Neighbouring reducers' rows of partial sums are C floats apart: each
  // starts its row at the vec4 (rj * C / 32) mod C4 (rot), so that 8 of them
  // (a 128-byte access) cover the 32 banks once.
  const bool reducer = tid < TS * HP;
  const uint rj = tid % TS, rh = tid / TS;
  const uint rot = (rj * C) >> 5u;

  float acc[HT * 8u];
  [[unroll]] for (uint i = 0u; i < HT * 8u; ++i) acc[i] = 0.0;
  float m_run = kLow, l_run = 0.0;  // the reducer's slot and head

  // The lane's offsets for small blocks; its codes start `shift` bits into
  // their word and run into the next (`two`) at 3 bits.
  const uvec3 lane32 = uvec3(uint(k_lane(gm, c)), uint(codes_lane(gm, c)), uint(scale_lane(gm, c)));
  const uint shift = 8u * ((kBits * c) & 3u);
  const bool two = shift + 8u * kBits > 32u;

  // Loads of this tile in flight (K, V), the next tile's V, and the block
  // ids of the next tile.
  uvec4 kr[kPasses];
  uint vw0[kPasses], vw1[kPasses], vsc[kPasses];
  uint vn0[kPasses], vn1[kPasses], vns[kPasses];
  int bid[kPasses];
  uint start = gm.lo;
  block_ids(gm, loader, start, j, TS, bid);
  load_tile(gm, start, j, TS, c, lane32, two, bid, kr, vw0, vw1, vsc);
  block_ids(gm, loader, start + N, j, TS, bid);

  while (start < gm.hi) {
    const uint next = start + N;
    // Each loader's share of its tokens' dot products, one per head: every
    // q load (4 dims of a head) serves the tile's kPasses tokens.
    if (loader) {
      float k[kPasses * 8u];
      [[unroll]] for (uint p = 0u; p < kPasses; ++p)
        [[unroll]] for (uint i = 0u; i < 4u; ++i) {
          k[p * 8u + 2u * i] = uintBitsToFloat(kr[p][i] << 16u);
          k[p * 8u + 2u * i + 1u] = uintBitsToFloat(kr[p][i] & 0xffff0000u);
        }
      float s[kPasses * HT];
      [[unroll]] for (uint i = 0u; i < kPasses * HT; ++i) s[i] = 0.0;
      [[unroll]] for (uint hh = 0u; hh < HT; ++hh)
        [[unroll]] for (uint half_ = 0u; half_ < 2u; ++half_) {
          const vec4 qv = q_s[(h_first + hh) * (gm.dim / 4u) + half_ * C + c];
          [[unroll]] for (uint p = 0u; p < kPasses; ++p)
            [[unroll]] for (uint i = 0u; i < 4u; ++i)
              s[p * HT + hh] += qv[i] * k[p * 8u + 4u * half_ + i];
        }
      // [pass][head][slot][chunk] as vec4s (C is a multiple of 4): a warp's
      // lanes write consecutive floats.
      [[unroll]] for (uint p = 0u; p < kPasses; ++p) {
        const uint base = ((p * HP + h_first) * TS + j) * C4 + c / 4u;
        [[unroll]] for (uint hh = 0u; hh < HT; ++hh)
          red_s[base + hh * TS * C4][c & 3u] = s[p * HT + hh];
      }
    }
    // The next tile's rows are read while this one finishes.
    load_tile(gm, next, j, TS, c, lane32, two, bid, kr, vn0, vn1, vns);
    block_ids(gm, loader, next + N, j, TS, bid);
    barrier();
    // Scores, and the online softmax of each (slot, head). The sums' loads
    // are unrolled so that all of them are in flight at once.
    if (reducer) {
      float x[kPasses];
      bool valid[kPasses];
      float m_new = m_run;
      [[unroll]] for (uint p = 0u; p < kPasses; ++p) {
        const uint n = p * TS + rj;
        valid[p] = start + n < gm.hi && rh < gm.hpc;
        const uint row = ((p * HP + rh) * TS + rj) * C4;
        vec4 s4 = vec4(0.0);
        [[unroll]] for (uint k = 0u; k < kMaxHeadDim / 32u; ++k)
          if (k < C4) s4 += red_s[row + ((k + rot) & (C4 - 1u))];
        x[p] = valid[p] ? (s4.x + s4.y) + (s4.z + s4.w) : kLow;
        m_new = max(m_new, x[p]);
      }
      // 1 while the slot's max stays; (about) 0 at its first token, where
      // its sums are still 0.
      const float alpha = exp2(m_run - m_new);
      float sum = 0.0;
      [[unroll]] for (uint p = 0u; p < kPasses; ++p) {
        const float w = valid[p] ? exp2(x[p] - m_new) : 0.0;
        const uint wi = (p * TS + rj) * HP + rh;
        weight_s[wi >> 2u][wi & 3u] = w;
        sum += w;
      }
      l_run = l_run * alpha + sum;
      m_run = m_new;
      alpha_s[tid] = alpha;
    }
    barrier();
    // The weighted V values into the loader's outputs: the weight of a head
    // times the token's scale, then one multiply-add a value.
    if (loader) {
      float a[HT];
      bool rescale = false;
      [[unroll]] for (uint hh = 0u; hh < HT; ++hh) {
        a[hh] = alpha_s[(h_first + hh) * TS + j];
        rescale = rescale || a[hh] != 1.0;
      }
      if (rescale)
        [[unroll]] for (uint i = 0u; i < HT * 8u; ++i) acc[i] *= a[i / 8u];
      [[unroll]] for (uint p = 0u; p < kPasses; ++p) {
        float v[8];
        decode_codes(lane_codes(vw0[p], vw1[p], shift), v);
        const float sc = scale_of(vsc[p]);
        const uint wi = (p * TS + j) * HP + h_first;
        float w[HT];
        if (HT == 4u) {
          const vec4 w4 = weight_s[wi >> 2u];  // wi is a multiple of 4
          [[unroll]] for (uint hh = 0u; hh < HT; ++hh) w[hh] = w4[hh];
        } else {
          [[unroll]] for (uint hh = 0u; hh < HT; ++hh)
            w[hh] = weight_s[(wi + hh) >> 2u][(wi + hh) & 3u];
        }
        [[unroll]] for (uint hh = 0u; hh < HT; ++hh) {
          const float ws = w[hh] * sc;
          [[unroll]] for (uint i = 0u; i < 8u; ++i) acc[hh * 8u + i] += ws * v[i];
        }
      }
    }
    vw0 = vn0;
    vw1 = vn1;
    vsc = vns;
    start = next;
  }

  // The slots' (max, sum) pairs merge as splits do: slot j's weight is
  // 2^(m_j - M) over the slots with tokens, M their largest max.
  if (reducer) {
    slot_m_s[tid] = m_run;
    slot_l_s[tid] = l_run;
  }
  barrier();
  if (reducer) {
    float m = kLow;
    for (uint s = 0u; s < TS; ++s)
      if (slot_l_s[rh * TS + s] > 0.0) m = max(m, slot_m_s[rh * TS + s]);
    alpha_s[tid] = l_run > 0.0 ? exp2(m_run - m) : 0.0;
    if (rj == 0u) {
      float l = 0.0;
      for (uint s = 0u; s < TS; ++s) {
        const float ls = slot_l_s[rh * TS + s];
        if (ls > 0.0) l += exp2(slot_m_s[rh * TS + s] - m) * ls;
      }
      head_m_s[rh] = m;
      head_l_s[rh] = l;
    }
  }
  barrier();
  if (loader)
    [[unroll]] for (uint i = 0u; i < HT * 8u; ++i) acc[i] *= alpha_s[(h_first + i / 8u) * TS + j];
  // A tree over the slots into slot 0 through red_s: the slots [h, 2h) add
  // into [0, h), h halving from the largest power of two below TS. A slot's
  // outputs are [head][dim], two vec4s a loader and head.
  uint half_n = 1u;
  while (2u * half_n < TS) half_n *= 2u;
  for (; TS > 1u && half_n > 0u; half_n /= 2u) {
    if (loader && j >= half_n && j < 2u * half_n) {
      const uint base = (((j - half_n) * HP + h_first) * gm.dim + 8u * c) / 4u;
      [[unroll]] for (uint hh = 0u; hh < HT; ++hh) {
        const uint at = base + hh * (gm.dim / 4u);
        red_s[at] = vec4(acc[hh * 8u], acc[hh * 8u + 1u], acc[hh * 8u + 2u], acc[hh * 8u + 3u]);
        red_s[at + 1u] =
            vec4(acc[hh * 8u + 4u], acc[hh * 8u + 5u], acc[hh * 8u + 6u], acc[hh * 8u + 7u]);
      }
    }
    barrier();
    if (loader && j < half_n && j + half_n < TS) {
      const uint base = ((j * HP + h_first) * gm.dim + 8u * c) / 4u;
      [[unroll]] for (uint hh = 0u; hh < HT; ++hh) {
        const uint at = base + hh * (gm.dim / 4u);
        const vec4 lo = red_s[at], hi = red_s[at + 1u];
        [[unroll]] for (uint i = 0u; i < 4u; ++i) {
          acc[hh * 8u + i] += lo[i];
          acc[hh * 8u + 4u + i] += hi[i];
        }
      }
    }
    barrier();
  }

  // Slot 0 writes: out for the one-pass entries, else the unnormalised
  // partials and the (max, sum) pairs.
  [[unroll]] for (uint hh = 0u; hh < HT; ++hh) {
    const uint h = h_first + hh;
    if (loader && j == 0u && h < gm.hpc) {
      const float l = head_l_s[h];
      const uint64_t row = uint64_t(gm.seq) * gm.num_q_heads + gm.h0 + h;
#if TPA_SPLIT
      const uint64_t part = row * gm.num_splits + gm.z;
      const uint64_t at = gm.part_acc + 4ul * (part * gm.dim + 8u * c);
      [[unroll]] for (uint i = 0u; i < 8u; ++i)
        F32Ptr(at).v[i] = l > 0.0 ? acc[hh * 8u + i] : 0.0;
      if (c == 0u) {
        U32Ptr(gm.part_ml + 8ul * part).v[0] =
            l > 0.0 ? floatBitsToUint(head_m_s[h]) : kMinusInfBits;
        F32Ptr(gm.part_ml + 8ul * part).v[1] = l;
      }
#else
      const float inv_l = l > 0.0 ? 1.0 / l : 0.0;
      const uint64_t at = gm.out_at + 2ul * (row * gm.dim + 8u * c);
      [[unroll]] for (uint i = 0u; i < 8u; ++i)
        U16Ptr(at).v[i] = uint16_t(f32_to_bf16(acc[hh * 8u + i] * inv_l));
#endif
    }
  }
}
