// One instance of the SDPA decode of mla_decode.glsl (whose comment
// describes the work): chunks of MD_W floats (MD_VEC, loaded through
// MD_PTR), MD_NPV V chunks a lane; its functions end in MD_SUFFIX. That file
// includes this one once per instance, so that every register array below
// has a compile-time size and constant indices.

// Tile from token t0 (its tokens j < lim exist): the lane's K chunks of
// load round kr.
void MD_CAT(md_load_k_, MD_SUFFIX)(in MdGeom gm, in MdLanes ln, uint64_t t0, uint lim, uint kr,
                                   out MD_VEC kb[kKLoads]) {
  const uint first = kr * kKLoads;
  const uint64_t at = ln.k_at + t0 * gm.k_tok + uint64_t(first) * ln.k_step;
  [[unroll]] for (uint r = 0u; r < kKLoads; ++r) {
    const bool on = ln.k_lane && ln.kj < lim && ln.kcl + ln.lpr * (first + r) < ln.ck;
    kb[r] = on ? MD_PTR(at + r * ln.k_step).v : MD_VEC(0.0);
  }
}

// The lane's V chunks of that tile: [token round][chunk].
void MD_CAT(md_load_v_, MD_SUFFIX)(in MdGeom gm, in MdLanes ln, uint64_t t0, uint lim,
                                   out MD_VEC vb[kVLoads]) {
  [[unroll]] for (uint tr = 0u; tr < kVLoads / MD_NPV; ++tr) {
    const uint j = ln.vs + ln.tsv * tr;
    const bool on = ln.v_lane && j < ln.T && j < lim;
    const uint64_t at = ln.v_at + (t0 + ln.tsv * tr) * gm.v_tok;
    [[unroll]] for (uint pv = 0u; pv < MD_NPV; ++pv) {
      vb[tr * MD_NPV + pv] = on && ln.vc + kThreads * pv < ln.cvp
                                 ? MD_PTR(at + pv * (kThreads * MD_W * 4u)).v
                                 : MD_VEC(0.0);
    }
  }
}

// out[h] for V chunks [c0, c0 + cvp): softmax attention over every token,
// times the gate.
void MD_CAT(md_decode_, MD_SUFFIX)(in MdGeom gm, uint c0, uint cvp) {
  const uint lane = gl_LocalInvocationIndex;
  const MdLanes ln = md_lanes(gm, c0, cvp, MD_W, MD_NPV);
  MD_VEC kb[kKLoads], vb[kVLoads], acc[MD_NPV];
  [[unroll]] for (uint pv = 0u; pv < MD_NPV; ++pv) acc[pv] = MD_VEC(0.0);
  float m_run = kLow;  // the running max, the same in every lane
  float l_part = 0.0;  // the lane's share of the running sum (token j of each tile)
  uint64_t t0 = 0ul;   // the tile's first token
  uint rem = gm.seq_len;  // tokens from t0 on
  uint par = 0u;
  MD_CAT(md_load_k_, MD_SUFFIX)(gm, ln, t0, rem, 0u, kb);
  MD_CAT(md_load_v_, MD_SUFFIX)(gm, ln, t0, rem, vb);
  while (rem > 0u) {
    const uint next = rem > ln.T ? rem - ln.T : 0u;  // tokens from the next tile on
    // The lane's part of its token's dot: two sums, so that the additions
    // do not wait on each other.
    MD_VEC d0 = MD_VEC(0.0), d1 = MD_VEC(0.0);
    for (uint kr = 0u; kr < ln.krounds; ++kr) {
      if (kr > 0u) MD_CAT(md_load_k_, MD_SUFFIX)(gm, ln, t0, rem, kr, kb);
      [[unroll]] for (uint r = 0u; r < kKLoads; ++r) {
        const uint c = ln.kcl + ln.lpr * (kr * kKLoads + r);
        const MD_VEC qc = c < ln.ck ? MD_Q(gm, c) : MD_VEC(0.0);
        if ((r & 1u) == 0u)
          d0 += qc * kb[r];
        else
          d1 += qc * kb[r];
      }
    }
    md_part[par][lane] = dot(d0 + d1, MD_VEC(1.0));
    MD_CAT(md_load_k_, MD_SUFFIX)(gm, ln, t0 + ln.T, next, 0u, kb);
    barrier();
    if (lane < ln.T) {
      float s = 0.0;
      for (uint i = 0u; i < ln.lpr; ++i) s += md_part[par][lane * ln.lpr + i];
      md_score[par][lane] = lane < rem ? s : kLow;
    }
    barrier();
    float m_new = m_run;
    for (uint j = 0u; j < ln.T; ++j) m_new = max(m_new, md_score[par][j]);
    const float alpha = exp2(m_run - m_new);  // 0 at the first tile
    m_run = m_new;
    l_part *= alpha;
    if (lane < ln.T && lane < rem) l_part += exp2(md_score[par][lane] - m_new);
    [[unroll]] for (uint pv = 0u; pv < MD_NPV; ++pv) acc[pv] *= alpha;
    [[unroll]] for (uint tr = 0u; tr < kVLoads / MD_NPV; ++tr) {
      const uint j = ln.vs + ln.tsv * tr;
      if (ln.v_lane && j < ln.T && j < rem) {
        const float w = exp2(md_score[par][j] - m_new);
        [[unroll]] for (uint pv = 0u; pv < MD_NPV; ++pv) acc[pv] += w * vb[tr * MD_NPV + pv];
      }
    }
    MD_CAT(md_load_v_, MD_SUFFIX)(gm, ln, t0 + ln.T, next, vb);
    t0 += ln.T;
    rem = next;
    par ^= 1u;
  }

  // The sum's shares, and the V slots' outputs into slot 0.
  md_l[lane] = l_part;
  if (MD_NPV == 1u) md_merge[lane] = MD_TO_VEC4(acc[0]);
  barrier();
  float l = 0.0;
  for (uint j = 0u; j < kThreads; ++j) l += md_l[j];
  if (ln.v_lane && ln.vs == 0u) {
    if (MD_NPV == 1u)
      for (uint s = 1u; s < ln.tsv; ++s) acc[0] += MD_FROM_VEC4(md_merge[s * cvp + ln.vc]);
    const float inv_l = l > 0.0 ? 1.0 / l : 0.0;  // seq_len 0: zeros
    [[unroll]] for (uint pv = 0u; pv < MD_NPV; ++pv) {
      if (ln.vc + kThreads * pv >= cvp) break;
      const uint64_t off = uint64_t(c0 + ln.vc + kThreads * pv) * (MD_W * 4u);
      MD_VEC o = acc[pv] * inv_l;
      if (gm.gate) {
        // sigmoid(g) = 1 / (1 + e^-g); e^-g kept finite (Vulkan need not keep infinities).
        o *= 1.0 / (1.0 + exp(min(-MD_PTR(gm.g + off).v, MD_VEC(80.0))));
      }
      MD_OUT_PTR(gm.out_ + off).v = o;
    }
  }
  barrier();  // before another pass reuses the shared arrays
}
