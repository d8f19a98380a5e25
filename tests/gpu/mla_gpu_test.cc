// The MLA ops on a GPU backend (cuda, or vulkan with --backend=vulkan) against the cpu backend,
// which runs the reference implementations (the oracle). Both devices get the same random, non-zero
// inputs; every output buffer is poisoned (0xff: bf16 and fp8 NaN, f32 NaN) on both before the op
// runs, so an element the GPU fails to write, or writes where it should not, shows up. The op
// wrappers are the same calls on both backends. Tolerances are those of docs/kernels.md ("Module
// mla", "Tolerances").
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gpu_test_support.h"
#include "sparkrt/numeric.h"
#include "sparkrt/ops/mla.h"
#include "sparkrt/sparkrt.h"
#include "sparkrt/verify/tolerances.h"

namespace sparkrt {
namespace {

namespace ops = sparkrt::ops;
namespace vs_cpu = verify::gpu_vs_reference;  // docs/kernels.md, "Tolerances"
using numeric::bf16_bits;
using numeric::fp8_bits;
using namespace gpu_test;

using Side = OpSide<ops::MlaKernels>;
using Pair = DevicePair<Side>;
Pair& pair() { return op_pair<ops::MlaKernels>(); }

// ── the copies and the GEMV ─────────────────────────────────────────────────

TEST_CASE("mla_batched_gemv matches the reference over heads, shapes and strides") {
  Pair& p = pair();
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 gen(seed);
  struct Shape {
    uint32_t heads, n_out, k, input_stride, output_stride;
  };
  // q_nope absorption into a 576-wide row, the V up-projection, and odd sizes.
  for (const Shape& s : {Shape{16, 512, 128, 192, 576}, Shape{64, 512, 128, 192, 576},
                         Shape{128, 128, 512, 512, 128}, Shape{16, 517, 100, 103, 530},
                         Shape{64, 9, 64, 64, 16}, Shape{128, 512, 128, 192, 576}}) {
    INFO("heads " << s.heads << " n_out " << s.n_out << " k " << s.k << " input_stride "
                  << s.input_stride << " output_stride " << s.output_stride);
    const auto in = random_bf16(gen, size_t{s.heads} * s.input_stride);
    const auto w = random_bf16(gen, size_t{s.heads} * s.n_out * s.k);
    BufferPair input(p, in), weight(p, w), out(p, size_t{s.heads} * s.output_stride * 2);
    out.poison();
    for (int side = 0; side < 2; ++side) {
      Side& d = p.side(side);
      REQUIRE_OK(ops::mla_batched_gemv(
          *d.dev, d.k,
          {.input = input.on(side), .weight = weight.on(side), .output = out.on(side),
           .n_out = s.n_out, .k = s.k, .num_heads = s.heads, .input_stride = s.input_stride,
           .output_stride = s.output_stride}));
    }
    const auto g = out.read<uint16_t>(0), c = out.read<uint16_t>(1);
    Tally t;
    for (uint32_t h = 0; h < s.heads; ++h)
      for (uint32_t n = 0; n < s.output_stride; ++n) {
        const size_t i = size_t{h} * s.output_stride + n;
        if (n >= s.n_out) {  // past n_out: never written
          if (g[i] != 0xffff || c[i] != 0xffff) t.mismatch(i, bf16d(g[i]), bf16d(c[i]));
          continue;
        }
        double abs_sum = 0;
        for (uint32_t j = 0; j < s.k; ++j)
          abs_sum += std::fabs(bf16d(w[(size_t{h} * s.n_out + n) * s.k + j]) *
                               bf16d(in[size_t{h} * s.input_stride + j]));
        t.add(i, bf16d(g[i]), bf16d(c[i]), vs_cpu::kMlaBatchedGemv(bf16d(c[i]), abs_sum));
      }
    t.check("mla_batched_gemv");
  }
}

TEST_CASE("mla_q_rope_scatter and mla_q_rope_writeback match the reference bit for bit") {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 gen(seed);
  struct Shape {
    uint32_t nq, hd, nope, rope, kv_lora, dim;
  };
  for (const Shape& s : {Shape{16, 192, 128, 64, 512, 576}, Shape{64, 192, 128, 64, 512, 576},
                         Shape{128, 192, 128, 64, 512, 576}, Shape{7, 50, 16, 32, 100, 140},
                         Shape{300, 200, 128, 64, 512, 600}}) {
    INFO("nq " << s.nq << " hd " << s.hd << " nope " << s.nope << " rope " << s.rope
               << " kv_lora " << s.kv_lora << " mla_cache_dim " << s.dim);
    // The absorbed buffer starts with random contents: only the rope parts may change.
    BufferPair q_full(pair(), random_bf16(gen, size_t{s.nq} * s.hd));
    BufferPair absorbed(pair(), random_bf16(gen, size_t{s.nq} * s.dim));
    BufferPair contiguous(pair(), size_t{s.nq} * s.rope * 2 + 64);  // poisoned tail: not written
    BufferPair rotated(pair(), random_bf16(gen, size_t{s.nq} * s.rope));
    contiguous.poison();
    for (int side = 0; side < 2; ++side) {
      Side& d = pair().side(side);
      REQUIRE_OK(ops::mla_q_rope_scatter(
          *d.dev, d.k,
          {.q_full = q_full.on(side), .q_absorbed_buf = absorbed.on(side),
           .q_rope_contiguous = contiguous.on(side), .nq = s.nq, .hd = s.hd, .nope = s.nope,
           .rope = s.rope, .kv_lora = s.kv_lora, .mla_cache_dim = s.dim}));
    }
    check_bitwise<uint16_t>(contiguous, "scatter: q_rope_contiguous");
    check_bitwise<uint16_t>(absorbed, "scatter: q_absorbed_buf");
    for (int side = 0; side < 2; ++side) {
      Side& d = pair().side(side);
      REQUIRE_OK(ops::mla_q_rope_writeback(
          *d.dev, d.k,
          {.q_rope_direct = rotated.on(side), .q_absorbed_buf = absorbed.on(side), .nq = s.nq,
           .rope = s.rope, .kv_lora = s.kv_lora, .mla_cache_dim = s.dim}));
    }
    check_bitwise<uint16_t>(absorbed, "writeback: q_absorbed_buf");
    // The writeback really wrote: the rope parts are the rotated input now.
    const auto a = absorbed.read<uint16_t>(0), r = rotated.read<uint16_t>(0);
    size_t wrong = 0;
    for (uint32_t h = 0; h < s.nq; ++h)
      for (uint32_t i = 0; i < s.rope; ++i)
        wrong += a[size_t{h} * s.dim + s.kv_lora + i] != r[size_t{h} * s.rope + i];
    CHECK(wrong == 0);
  }
}

TEST_CASE("mla_cache_assemble matches the reference bit for bit") {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 gen(seed);
  struct Shape {
    uint32_t kv_lora, rope, dim;
  };
  for (const Shape& s : {Shape{512, 64, 576}, Shape{512, 64, 600}, Shape{128, 32, 200},
                         Shape{960, 64, 1024}, Shape{100, 20, 130}}) {
    INFO("kv_lora " << s.kv_lora << " rope " << s.rope << " mla_cache_dim " << s.dim);
    BufferPair latent(pair(), random_bf16(gen, s.kv_lora)),
        k_rope(pair(), random_bf16(gen, s.rope));
    // Three rows each; the op writes the middle one, its neighbours stay poisoned.
    BufferPair kc(pair(), size_t{3} * s.dim * 2), vc(pair(), size_t{3} * s.dim * 2);
    kc.poison();
    vc.poison();
    for (int side = 0; side < 2; ++side) {
      Side& d = pair().side(side);
      REQUIRE_OK(ops::mla_cache_assemble(*d.dev, d.k,
                                         {.kv_latent = latent.on(side),
                                          .k_rope = k_rope.on(side),
                                          .k_cache = kc.on(side) + uint64_t{s.dim} * 2,
                                          .v_cache = vc.on(side) + uint64_t{s.dim} * 2,
                                          .kv_lora = s.kv_lora,
                                          .rope = s.rope,
                                          .mla_cache_dim = s.dim}));
    }
    check_bitwise<uint16_t>(kc, "k_cache");
    check_bitwise<uint16_t>(vc, "v_cache");
    const auto k = kc.read<uint16_t>(0);
    size_t poisoned_middle = 0;
    for (uint32_t d = 0; d < s.dim; ++d) poisoned_middle += k[s.dim + d] == 0xffff;
    CHECK(poisoned_middle == 0);
  }
}

// ── the split merge ─────────────────────────────────────────────────────────

// mla_decode_combine on its own: the split decode reaches it only where the op
// splits, which it does not on every backend.

TEST_CASE("mla_decode_combine matches the reference: splits, empty splits, sinks, dims") {
  Pair& p = pair();
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 gen(seed);
  struct Shape {
    uint32_t heads, seqs, dv, splits;
    bool sinks;
    uint32_t block;
  };
  for (const Shape& s :
       {Shape{16, 3, 512, 2, false, 256}, Shape{16, 3, 512, 5, true, 256},
        Shape{128, 2, 512, 13, true, 256}, Shape{8, 2, 448, 7, false, 256},
        Shape{4, 2, 512, 256, true, 256}, Shape{4, 1, 512, 1, true, 256},
        Shape{6, 2, 61, 9, true, 256}, Shape{3, 2, 960, 3, false, 256},
        Shape{5, 2, 512, 40, true, 96}, Shape{5, 2, 64, 17, true, 256},
        Shape{2, 2, 8, 300, false, 256}, Shape{2, 2, 8, 0, false, 256}}) {
    INFO("heads " << s.heads << " seqs " << s.seqs << " dv " << s.dv << " splits " << s.splits
                  << " sinks " << s.sinks << " block " << s.block);
    const uint64_t rows = uint64_t{s.heads} * s.seqs;
    std::vector<float> acc(rows * s.splits * s.dv), ml(rows * s.splits * 2);
    for (uint64_t r = 0; r < rows; ++r)
      for (uint32_t z = 0; z < s.splits; ++z) {
        const uint64_t pr = r * s.splits + z;
        // About one split in four empty (whole rows empty for some heads);
        // an empty split's accumulators are NaN here: they must not be read.
        const bool empty = (gen() % 4 == 0) || (r % 5 == 3);
        const float l = empty ? 0.0f : std::uniform_real_distribution<float>(0.5f, 64.0f)(gen);
        ml[2 * pr] = empty ? -INFINITY : std::uniform_real_distribution<float>(-30.0f, 30.0f)(gen);
        ml[2 * pr + 1] = l;
        for (uint32_t d = 0; d < s.dv; ++d)
          acc[pr * s.dv + d] = empty ? NAN : l * random_mag(gen, 0.01f, 1.5f);
      }
    BufferPair pa(p, acc), pm(p, ml), sk(p, random_f32(gen, s.heads, 0.5f, 30.0f)),
        out(p, rows * s.dv * 2 + 64);
    out.poison();
    for (int side = 0; side < 2; ++side) {
      Side& d = p.side(side);
      const absl::Status st = KernelLaunch(*d.dev, d.k.mla_decode_combine)
                                  .grid({s.heads, s.seqs})
                                  .block({s.block})
                                  .arg(pa.on(side))
                                  .arg(pm.on(side))
                                  .arg(out.on(side))
                                  .arg(s.sinks ? sk.on(side) : DevicePtr{})
                                  .arg(s.heads)
                                  .arg(s.dv)
                                  .arg(s.splits)
                                  .launch();
      if (s.splits == 0 || s.splits > 256) {
        // The reference refuses; the kernel returns without writing.
        if (side == 0) REQUIRE_OK(st);
        continue;
      }
      REQUIRE_OK(st);
    }
    const auto g = out.read<uint16_t>(0), c = out.read<uint16_t>(1);
    if (s.splits == 0 || s.splits > 256) {
      size_t written = 0;
      for (auto x : g) written += x != 0xffff;
      CHECK(written == 0);
      continue;
    }
    Tally t;
    size_t tail = 0;
    for (size_t i = 0; i < g.size(); ++i) {
      if (i >= rows * s.dv) {
        tail += g[i] != 0xffff;
        continue;
      }
      // f32 sums in another order (the terms cancel: |V| <= 1.5), exp2 and a
      // reciprocal: a bf16 ulp and far inside the decode's 2^-10 max |V|.
      t.add(i, bf16d(g[i]), bf16d(c[i]), 0x1p-7 * std::fabs(bf16d(c[i])) + 0x1p-16 * 1.5);
    }
    t.check("mla_decode_combine");
    CHECK(tail == 0);
  }
}

// ── paged decode over the compressed cache ──────────────────────────────────

struct DecodeCase {
  bool nvfp4;
  uint32_t q_heads, kv_heads, q_dim, kv_dim, block_size;
  std::vector<int32_t> lens;
  uint32_t window = 0;     // fp8 only
  bool sinks = false;      // fp8 only
  uint32_t comp = 0;       // compressed rows per sequence, fp8 only
  // With a workspace, 0 lets the op split (the cuda side does for few
  // sequences, the cpu side never); n > 1 forces n splits on both sides.
  bool workspace = false;
  uint32_t splits = 0;
  // nvfp4: V in the K pool, as MLA stores it (fp8 does so where sinks are on
  // and there is neither a window nor a compressed pool).
  bool shared_pool = false;
  // nvfp4: launch mla_paged_decode_nvfp4_split straight through KernelLaunch
  // in the tiled geometry with `splits` splits on both sides and compare
  // every split's partials (the path a backend whose op plans per head, such
  // as vulkan, otherwise never runs).
  bool direct_split = false;
};

std::string describe(const DecodeCase& c) {
  std::string lens;
  for (int32_t l : c.lens) lens += std::to_string(l) + " ";
  return std::string(c.nvfp4 ? "nvfp4" : "fp8") + " q_heads " + std::to_string(c.q_heads) +
         " kv_heads " + std::to_string(c.kv_heads) + " q_head_dim " + std::to_string(c.q_dim) +
         " kv_cache_dim " + std::to_string(c.kv_dim) + " block_size " +
         std::to_string(c.block_size) + " window " + std::to_string(c.window) + " sinks " +
         (c.sinks ? "on" : "null") + " comp_block_count " + std::to_string(c.comp) +
         (c.workspace ? " workspace, splits " + std::to_string(c.splits) : "") +
         (c.nvfp4 && c.shared_pool ? " V in the K pool" : "") +
         (c.direct_split ? " (direct split launch)" : "") + " lens " + lens;
}

void run_decode(const DecodeCase& c, std::mt19937_64& gen) {
  INFO(describe(c));
  const uint32_t seqs = uint32_t(c.lens.size());
  const int32_t longest = std::max(1, *std::max_element(c.lens.begin(), c.lens.end()));
  const uint32_t max_blocks = uint32_t((longest + c.block_size - 1) / c.block_size) + 1;
  uint32_t used = 0;
  for (int32_t l : c.lens) used += (l + c.block_size - 1) / c.block_size;
  const uint32_t pool_blocks = used + 2;
  std::vector<int32_t> ids(pool_blocks);
  for (uint32_t i = 0; i < pool_blocks; ++i) ids[i] = int32_t(i);
  std::shuffle(ids.begin(), ids.end(), gen);
  std::vector<int32_t> tables(size_t{seqs} * max_blocks, -1);
  uint32_t next = 0;
  for (uint32_t s = 0; s < seqs; ++s)
    for (uint32_t b = 0; b < (c.lens[s] + c.block_size - 1) / c.block_size; ++b)
      tables[size_t{s} * max_blocks + b] = ids[next++];

  const uint32_t dv = c.kv_dim - 64;
  const uint64_t row = uint64_t{c.kv_heads} * c.kv_dim;
  const float k_scale = 0.021f, v_scale = 0.017f;
  double max_v = 0;
  uint64_t stride = 0;
  ops::MlaNvfp4BlockLayout layout;
  std::vector<uint8_t> kp, vp;
  if (c.nvfp4) {
    layout = ops::mla_nvfp4_block_layout(c.block_size, c.kv_heads, c.kv_dim);
    stride = layout.block_stride_bytes;
    kp.resize(pool_blocks * stride);
    vp.resize(pool_blocks * stride);
    for (auto* pool : {&kp, &vp})
      for (uint64_t b = 0; b < pool_blocks; ++b) {
        uint8_t* base = pool->data() + b * stride;
        // Any nibble pattern is a value; scales small enough for a soft softmax.
        for (uint64_t i = 0; i < layout.data_section_bytes; ++i) base[i] = uint8_t(gen());
        for (uint64_t i = layout.data_section_bytes; i < stride; ++i)
          base[i] = sparkrt::numeric::f32_to_fp8_e4m3(
              std::uniform_real_distribution<float>(0.05f, 0.4f)(gen));
      }
    for (uint64_t b = 0; b < pool_blocks; ++b)
      for (uint64_t i = layout.data_section_bytes; i < stride; ++i)
        max_v = std::max(max_v, 6.0 * fp8d(vp[b * stride + i]));
  } else {
    stride = c.block_size * row + 64;  // padded blocks
    kp = random_fp8(gen, pool_blocks * stride, 2.0f, 100.0f);
    vp = random_fp8(gen, pool_blocks * stride, 2.0f, 100.0f);
    for (auto x : vp) max_v = std::max(max_v, std::fabs(fp8d(x)) * v_scale);
  }
  std::vector<uint8_t> comp_rows = random_fp8(gen, size_t{seqs} * c.comp * row + 1, 2.0f, 100.0f);
  if (c.comp > 0)
    for (auto x : comp_rows) max_v = std::max(max_v, std::fabs(fp8d(x)) * v_scale);

  BufferPair q(pair(), random_bf16(gen, size_t{seqs} * c.q_heads * c.q_dim));
  // K and V in separate pools, except where V is K itself (as MLA stores it).
  const bool shared = c.nvfp4 ? c.shared_pool : c.window == 0 && c.comp == 0 && c.sinks;
  BufferPair kc(pair(), kp), vc(pair(), vp), tb(pair(), tables), lb(pair(), c.lens),
      sinks(pair(), random_f32(gen, c.q_heads, 0.5f, 4.0f)), comp(pair(), comp_rows);
  if (shared && !c.nvfp4)
    for (auto x : kp) max_v = std::max(max_v, std::fabs(fp8d(x)) * v_scale);
  if (shared && c.nvfp4)
    for (uint64_t b = 0; b < pool_blocks; ++b)
      for (uint64_t i = layout.data_section_bytes; i < stride; ++i)
        max_v = std::max(max_v, 6.0 * fp8d(kp[b * stride + i]));
  BufferPair out(pair(), size_t{seqs} * c.q_heads * dv * 2);
  out.poison();
  const uint64_t ws_bytes =
      c.workspace ? ops::mla_decode_workspace_bytes(seqs, c.q_heads, c.kv_dim) : 16;
  BufferPair ws(pair(), ws_bytes);
  ws.poison();
  // The DeepSeek scale, 1/sqrt(nope + rope), not 1/sqrt(576).
  const float inv_sqrt_d = 1.0f / std::sqrt(192.0f);
  auto fp8_args = [&](int side) -> ops::MlaPagedDecodeFp8Args {
    return {.q = q.on(side),
            .k_cache = kc.on(side),
            .v_cache = shared ? kc.on(side) : vc.on(side),
            .o = out.on(side),
            .block_tables = tb.on(side),
            .seq_lens = lb.on(side),
            .max_blocks_per_seq = max_blocks,
            .num_q_heads = c.q_heads,
            .num_kv_heads = c.kv_heads,
            .q_head_dim = c.q_dim,
            .kv_cache_dim = c.kv_dim,
            .block_size = c.block_size,
            .inv_sqrt_d = inv_sqrt_d,
            .k_scale = k_scale,
            .v_scale = v_scale,
            .cache_stride = stride,
            .num_seqs = seqs,
            .sliding_window = c.window,
            .sinks = c.sinks ? sinks.on(side) : DevicePtr{},
            .comp_pool = c.comp > 0 ? comp.on(side) : DevicePtr{},
            .comp_block_count = c.comp,
            .workspace = c.workspace ? ws.on(side) : DevicePtr{},
            .workspace_bytes = ws_bytes,
            .num_splits = c.splits};
  };
  auto nvfp4_args = [&](int side) -> ops::MlaPagedDecodeNvfp4Args {
    return {.q = q.on(side),
            .k_cache = kc.on(side),
            .v_cache = shared ? kc.on(side) : vc.on(side),
            .o = out.on(side),
            .block_tables = tb.on(side),
            .seq_lens = lb.on(side),
            .max_blocks_per_seq = max_blocks,
            .num_q_heads = c.q_heads,
            .num_kv_heads = c.kv_heads,
            .q_head_dim = c.q_dim,
            .kv_cache_dim = c.kv_dim,
            .block_size = c.block_size,
            .inv_sqrt_d = inv_sqrt_d,
            .block_stride_bytes = layout.block_stride_bytes,
            .data_section_bytes = layout.data_section_bytes,
            .num_seqs = seqs,
            .workspace = c.workspace ? ws.on(side) : DevicePtr{},
            .workspace_bytes = ws_bytes,
            .num_splits = c.splits};
  };
  if (c.direct_split) {
    // Tiled geometry, two teams with 2 stages where the device allows it
    // (CUDA needs them; SPIR-V ignores the dynamic shared memory, and the
    // launch check wants it within the device's limit).
    const uint32_t group = c.q_heads / c.kv_heads;
    const uint32_t two_stages = contract::mla::tiled_fixed_bytes(2) +
                                2 * contract::mla::tiled_nvfp4_stage_bytes(!shared);
    const uint64_t parts = uint64_t{seqs} * c.q_heads * c.splits;
    const uint64_t ml_at = (parts * dv * 4 + 255) / 256 * 256;
    REQUIRE(ml_at + parts * 8 <= ws_bytes);
    for (int side = 0; side < 2; ++side) {
      Side& d = pair().side(side);
      const uint32_t shared_mem =
          two_stages <= d.dev->properties().max_shared_memory_per_block_optin ? two_stages : 0;
      REQUIRE_OK(KernelLaunch(*d.dev, d.k.mla_paged_decode_nvfp4_split)
                     .grid({c.kv_heads * ((group + 15) / 16), seqs, c.splits})
                     .block({contract::mla::kTiledThreads})
                     .shared_mem(shared_mem)
                     .arg(q.on(side))
                     .arg(kc.on(side))
                     .arg(shared ? kc.on(side) : vc.on(side))
                     .arg(ws.on(side))
                     .arg(ws.on(side) + ml_at)
                     .arg(tb.on(side))
                     .arg(lb.on(side))
                     .arg(max_blocks)
                     .arg(c.q_heads)
                     .arg(c.kv_heads)
                     .arg(c.q_dim)
                     .arg(c.kv_dim)
                     .arg(c.block_size)
                     .arg(inv_sqrt_d)
                     .arg(layout.block_stride_bytes)
                     .arg(layout.data_section_bytes)
                     .launch());
    }
    // Compared at the reference's max: s * 2^(m - m_ref); the same splits
    // empty, with (-inf, 0) and zeros.
    const auto g = ws.read<float>(0), r = ws.read<float>(1);
    size_t bad = 0, first = 0;
    for (uint64_t z = 0; z < parts; ++z) {
      const double mg = g[ml_at / 4 + 2 * z], lg = g[ml_at / 4 + 2 * z + 1];
      const double mr = r[ml_at / 4 + 2 * z], lr = r[ml_at / 4 + 2 * z + 1];
      bool ok = (lg > 0) == (lr > 0);
      if (ok && lr > 0) {
        const double f = std::exp2(mg - mr);
        ok = std::fabs(lg * f - lr) <= vs_cpu::kSplitSumRel * lr;
        for (uint32_t d = 0; ok && d < dv; ++d) {
          const double a = g[z * dv + d] * f, b = r[z * dv + d];
          ok = std::fabs(a - b) <= vs_cpu::kSplitAcc(b, lr * max_v);
        }
      } else if (ok) {
        ok = mg == -INFINITY && mr == -INFINITY;
        for (uint32_t d = 0; ok && d < dv; ++d) ok = g[z * dv + d] == 0.0f && r[z * dv + d] == 0.0f;
      }
      if (!ok && bad++ == 0) first = z;
    }
    INFO(bad << " of " << parts << " split partials differ; first: split " << first % c.splits
              << " of row " << first / c.splits << ", gpu (max, sum) (" << g[ml_at / 4 + 2 * first]
              << ", " << g[ml_at / 4 + 2 * first + 1] << ") cpu (" << r[ml_at / 4 + 2 * first]
              << ", " << r[ml_at / 4 + 2 * first + 1] << ")");
    CHECK(bad == 0);
    return;
  }
  if (c.splits > 1) {
    // Where the tiled kernel does not fit (SPARKRT_CUDA_SHARED_MEMORY_OPTIN
    // set to a smaller part's, or lavapipe's 32 KiB), forced splits are
    // refused and nothing runs.
    Side& d = pair().side(0);
    absl::StatusOr<ops::MlaDecodePlan> plan;
    if (c.nvfp4) {
      auto unsplit = nvfp4_args(0);
      unsplit.num_splits = 0;
      plan = ops::plan_mla_paged_decode_nvfp4(*d.dev, unsplit);
    } else {
      auto unsplit = fp8_args(0);
      unsplit.num_splits = 0;
      plan = ops::plan_mla_paged_decode_fp8(*d.dev, unsplit);
    }
    REQUIRE_OK(plan.status());
    if (!plan->tiled) {
      const absl::Status s = c.nvfp4 ? ops::mla_paged_decode_nvfp4(*d.dev, d.k, nvfp4_args(0))
                                     : ops::mla_paged_decode_fp8(*d.dev, d.k, fp8_args(0));
      MESSAGE("forced splits refused: " << s.ToString());
      CHECK(s.code() == absl::StatusCode::kInvalidArgument);
      CHECK(std::string(s.message()).find("shared memory") != std::string::npos);
      return;
    }
  }
  for (int side = 0; side < 2; ++side) {
    Side& d = pair().side(side);
    if (c.nvfp4) {
      REQUIRE_OK(ops::mla_paged_decode_nvfp4(*d.dev, d.k, nvfp4_args(side)));
    } else {
      REQUIRE_OK(ops::mla_paged_decode_fp8(*d.dev, d.k, fp8_args(side)));
    }
  }
  const auto g = out.read<uint16_t>(0), r = out.read<uint16_t>(1);
  Tally t;
  for (size_t i = 0; i < g.size(); ++i)
    t.add(i, bf16d(g[i]), bf16d(r[i]), vs_cpu::kPagedDecodeAttn(bf16d(r[i]), max_v));
  t.check("decode output");
  // A sequence with nothing to attend gets exact zeros, with or without a sink.
  size_t nonzero_empty = 0;
  for (uint32_t s = 0; s < seqs; ++s)
    if (c.lens[s] == 0 && c.comp == 0)
      for (size_t i = size_t{s} * c.q_heads * dv; i < size_t{s + 1} * c.q_heads * dv; ++i)
        nonzero_empty += g[i] != 0;
  CHECK(nonzero_empty == 0);
}

TEST_CASE("mla_paged_decode_fp8 matches the reference: heads, blocks, windows, sinks, pool") {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 gen(seed);
  uint32_t n = 0;
  for (uint32_t q_heads : {16u, 64u, 128u})
    for (uint32_t block_size : {16u, 64u})
      for (bool sinks : {false, true})
        for (uint32_t comp : {0u, 5u}) {
          // Ragged: empty, one token, block-size edges, a longer one; fewer
          // tokens with more heads to keep the reference quick.
          const int32_t longer = int32_t(q_heads == 128 ? 300 + gen() % 200 : 600 + gen() % 600);
          std::vector<int32_t> lens = {0, 1, int32_t(block_size), int32_t(block_size) + 1,
                                       int32_t(2 + gen() % 100), longer};
          const uint32_t window = (n % 2 == 1) ? 37 + 61 * (n % 5) : 0;
          const uint32_t q_dim = n % 3 == 2 ? 512 : 576;  // 512: latent-only scores
          run_decode({.nvfp4 = false, .q_heads = q_heads, .kv_heads = 1, .q_dim = q_dim,
                      .kv_dim = 576, .block_size = block_size, .lens = lens, .window = window,
                      .sinks = sinks, .comp = comp},
                     gen);
          ++n;
        }
  // A window longer than every sequence, and a pool without a window.
  run_decode({.nvfp4 = false, .q_heads = 64, .kv_heads = 1, .q_dim = 576, .kv_dim = 576,
              .block_size = 64, .lens = {2000, 3}, .window = 4096, .sinks = true, .comp = 0},
             gen);
  // Grouped KV heads and a small head dim.
  run_decode({.nvfp4 = false, .q_heads = 8, .kv_heads = 2, .q_dim = 80, .kv_dim = 128,
              .block_size = 16, .lens = {333, 5, 0}, .window = 100, .sinks = true, .comp = 3},
             gen);
}

TEST_CASE("mla_paged_decode_fp8 split-KV matches the reference: forced and automatic splits") {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 gen(seed);
  // Few sequences: the op splits on the GPU. Long, ragged and empty ones;
  // more splits than some sequences have tiles.
  for (uint32_t splits : {0u, 2u, 5u, 13u})
    for (uint32_t q_heads : {16u, 128u}) {
      const bool sinks = splits % 2 == 1 || splits == 0;
      run_decode(
          {.nvfp4 = false,
           .q_heads = q_heads,
           .kv_heads = 1,
           .q_dim = 576,
           .kv_dim = 576,
           .block_size = 64,
           .lens = {q_heads == 16 ? int32_t(2500 + gen() % 1500) : int32_t(700 + gen() % 300), 0,
                    int32_t(1 + gen() % 130)},
           .window = splits == 2 ? 500u : 0u,
           .sinks = sinks,
           .comp = splits == 5 ? 4u : 0u,
           .workspace = true,
           .splits = splits},
          gen);
    }
  // The op's own split count for one long sequence and for grouped KV heads.
  run_decode({.nvfp4 = false, .q_heads = 64, .kv_heads = 1, .q_dim = 576, .kv_dim = 576,
              .block_size = 16, .lens = {4000}, .sinks = true, .workspace = true},
             gen);
  run_decode({.nvfp4 = false, .q_heads = 40, .kv_heads = 2, .q_dim = 512, .kv_dim = 576,
              .block_size = 32, .lens = {1500, 77}, .window = 1000, .workspace = true},
             gen);
}

TEST_CASE("mla_paged_decode_nvfp4 matches the reference over heads, blocks and dims") {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 gen(seed);
  for (uint32_t q_heads : {16u, 64u, 128u})
    for (uint32_t block_size : {16u, 64u}) {
      const int32_t longer = int32_t(q_heads == 128 ? 300 + gen() % 200 : 600 + gen() % 600);
      run_decode({.nvfp4 = true, .q_heads = q_heads, .kv_heads = 1,
                  .q_dim = block_size == 16 ? 512u : 576u, .kv_dim = 576,
                  .block_size = block_size,
                  .lens = {0, 1, int32_t(block_size) + 1, int32_t(3 + gen() % 60), longer}},
                 gen);
    }
  run_decode({.nvfp4 = true, .q_heads = 8, .kv_heads = 2, .q_dim = 80, .kv_dim = 128,
              .block_size = 16, .lens = {333, 5}},
             gen);
  run_decode({.nvfp4 = true, .q_heads = 16, .kv_heads = 1, .q_dim = 576, .kv_dim = 576,
              .block_size = 64, .lens = {3000}},
             gen);
}

// The tiled NVFP4 kernel (the MLA row: kv_cache_dim 576, q_head_dim a
// multiple of 16) as the fp8 one is tested: V in the K pool and apart, 16 to
// 128 query heads (ceil(group / 16) CTAs of up to 16 heads), grouped KV
// heads, latent-only scores, ragged and empty sequences; the tolerance is the
// fp8 tiled kernel's (docs/kernels.md, "Tiled decode").
TEST_CASE("mla_paged_decode_nvfp4 tiled matches the reference: pools, heads, groups") {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 gen(seed);
  for (uint32_t q_heads : {16u, 40u, 128u})
    for (bool shared : {true, false}) {
      const uint32_t block_size = shared ? 64 : 16;
      const int32_t longer = int32_t(q_heads == 128 ? 300 + gen() % 200 : 600 + gen() % 600);
      run_decode({.nvfp4 = true, .q_heads = q_heads, .kv_heads = 1,
                  .q_dim = shared ? 576u : 512u, .kv_dim = 576, .block_size = block_size,
                  .lens = {0, 1, int32_t(block_size), int32_t(block_size) + 1,
                           int32_t(2 + gen() % 100), longer},
                  .shared_pool = shared},
                 gen);
    }
  // Grouped KV heads: 2 of 24 query heads each (two CTAs per KV head, the
  // second with 8 heads).
  run_decode({.nvfp4 = true, .q_heads = 48, .kv_heads = 2, .q_dim = 576, .kv_dim = 576,
              .block_size = 32, .lens = {517, 3, 0}, .shared_pool = true},
             gen);
}

TEST_CASE("mla_paged_decode_nvfp4 split-KV matches the reference: forced and automatic splits") {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 gen(seed);
  // Few sequences: the op splits on the GPU. Long, ragged and empty ones;
  // more splits than some sequences have tiles.
  for (uint32_t splits : {0u, 2u, 5u, 13u})
    for (uint32_t q_heads : {16u, 128u}) {
      run_decode({.nvfp4 = true,
                  .q_heads = q_heads,
                  .kv_heads = 1,
                  .q_dim = 576,
                  .kv_dim = 576,
                  .block_size = 64,
                  .lens = {q_heads == 16 ? int32_t(2500 + gen() % 1500)
                                         : int32_t(700 + gen() % 300),
                           0, int32_t(1 + gen() % 130)},
                  .workspace = true,
                  .splits = splits,
                  .shared_pool = splits != 5},
                 gen);
    }
  // The op's own split count for one long sequence and for grouped KV heads.
  run_decode({.nvfp4 = true, .q_heads = 64, .kv_heads = 1, .q_dim = 576, .kv_dim = 576,
              .block_size = 16, .lens = {4000}, .workspace = true, .shared_pool = true},
             gen);
  run_decode({.nvfp4 = true, .q_heads = 40, .kv_heads = 2, .q_dim = 512, .kv_dim = 576,
              .block_size = 32, .lens = {1500, 77}, .workspace = true},
             gen);
}

TEST_CASE("mla_paged_decode_nvfp4_split partials match the reference, launched directly") {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 gen(seed);
  // Two CTAs per KV head (16 heads and 4), grouped KV heads, latent-only
  // scores; ragged and empty sequences, more splits than some have tiles.
  run_decode({.nvfp4 = true, .q_heads = 20, .kv_heads = 1, .q_dim = 576, .kv_dim = 576,
              .block_size = 64, .lens = {700, 0, 65, 1}, .workspace = true, .splits = 3,
              .shared_pool = true, .direct_split = true},
             gen);
  run_decode({.nvfp4 = true, .q_heads = 32, .kv_heads = 2, .q_dim = 512, .kv_dim = 576,
              .block_size = 16, .lens = {300, 129}, .workspace = true, .splits = 4,
              .shared_pool = true, .direct_split = true},
             gen);
}

}  // namespace
}  // namespace sparkrt
