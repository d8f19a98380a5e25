// Paged decode attention on a GPU backend (cuda, or vulkan with --backend=vulkan) against the cpu
// backend, which runs the reference implementations (the oracle). Both
// devices get the same random, non-zero inputs; every output buffer is
// poisoned (0xff: bf16 and fp8 NaN) on both before the op runs, so an
// element the GPU fails to write, or writes where it should not, shows up.
// The op wrappers are the same calls on both backends. Tolerances are those
// of docs/kernels.md ("Tolerances").
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
#include "sparkrt/ops/paged_attention.h"
#include "sparkrt/sparkrt.h"
#include "sparkrt/verify/tolerances.h"

namespace sparkrt {
namespace {

namespace ops = sparkrt::ops;
namespace vs_cpu = verify::gpu_vs_reference;  // docs/kernels.md, "Tolerances"
using numeric::bf16_bits;
using numeric::fp8_bits;
using namespace gpu_test;

using Side = OpSide<ops::PagedAttentionKernels>;
using Pair = DevicePair<Side>;
Pair& pair() { return op_pair<ops::PagedAttentionKernels>(); }

struct DecodeCase {
  bool fp8;
  uint32_t q_heads, kv_heads, dim, block_size, window;
  std::vector<int32_t> lens;
  uint32_t splits;  // the op's num_splits: 0 auto, 1 never, n forced
  float q_gain;     // scales q: larger makes the softmax peakier
  // q_stride - q_heads * head_dim: 24 keeps q's rows 16-byte aligned (the
  // kernels' whole-piece loads), an odd pad does not (their 2-byte loads).
  uint32_t q_pad = 24;
};

std::string describe(const DecodeCase& c) {
  std::string lens;
  for (int32_t l : c.lens) lens += std::to_string(l) + " ";
  return std::string(c.fp8 ? "fp8" : "bf16") + " q_heads " + std::to_string(c.q_heads) +
         " kv_heads " + std::to_string(c.kv_heads) + " head_dim " + std::to_string(c.dim) +
         " block_size " + std::to_string(c.block_size) + " window " + std::to_string(c.window) +
         " splits " + std::to_string(c.splits) + " q_pad " + std::to_string(c.q_pad) + " lens " +
         lens;
}

// With forced splits both sides wrote every split's partials to the same
// workspace layout (docs/kernels.md, "Split-KV"): each split's (max, sum)
// and partial output must agree, which pins the split boundaries, not only
// the merged result. Compared at the reference's max: s * 2^(m - m_ref).
void check_partials(const DecodeCase& c, const BufferPair& ws, uint64_t counter_bytes,
                    double max_v) {
  const uint64_t parts = uint64_t(c.lens.size()) * c.q_heads * c.splits;
  const uint64_t acc_at = counter_bytes / 4;
  const uint64_t ml_at = acc_at + (parts * c.dim * 4 + 255) / 256 * 256 / 4;
  const auto g = ws.read<float>(0), r = ws.read<float>(1);
  REQUIRE(g.size() >= ml_at + 2 * parts);
  size_t bad = 0, first = 0;
  for (uint64_t z = 0; z < parts; ++z) {
    const double mg = g[ml_at + 2 * z], lg = g[ml_at + 2 * z + 1];
    const double mr = r[ml_at + 2 * z], lr = r[ml_at + 2 * z + 1];
    bool ok = (lg > 0) == (lr > 0);  // the same splits have tokens
    if (ok && lr > 0) {
      const double f = std::exp2(mg - mr);
      ok = std::fabs(lg * f - lr) <= vs_cpu::kSplitSumRel * lr;
      for (uint32_t d = 0; ok && d < c.dim; ++d) {
        const double a = g[acc_at + z * c.dim + d] * f, b = r[acc_at + z * c.dim + d];
        ok = std::fabs(a - b) <= vs_cpu::kSplitAcc(b, lr * max_v);
      }
    } else if (ok) {
      ok = mg == -INFINITY && mr == -INFINITY;
      for (uint32_t d = 0; ok && d < c.dim; ++d)
        ok = g[acc_at + z * c.dim + d] == 0.0f && r[acc_at + z * c.dim + d] == 0.0f;
    }
    if (!ok && bad++ == 0) first = z;
  }
  INFO(bad << " of " << parts << " split partials differ; first: split " << first % c.splits
            << " of row " << first / c.splits << ", gpu (max, sum) (" << g[ml_at + 2 * first]
            << ", " << g[ml_at + 2 * first + 1] << ") cpu (" << r[ml_at + 2 * first] << ", "
            << r[ml_at + 2 * first + 1] << ")");
  CHECK(bad == 0);
}

// Runs one decode case on both devices through the op (or, with
// `seed_geometry`, straight through KernelLaunch with grid.x = num_q_heads)
// and compares the outputs.
void run_decode(const DecodeCase& c, std::mt19937_64& gen, bool seed_geometry = false) {
  Pair& p = pair();
  INFO(describe(c) << (seed_geometry ? " (seed geometry)" : ""));
  const uint32_t seqs = uint32_t(c.lens.size());
  const int32_t longest = *std::max_element(c.lens.begin(), c.lens.end());
  const uint32_t max_blocks = uint32_t((longest + c.block_size - 1) / c.block_size) + 1;
  const uint32_t row = c.kv_heads * c.dim;
  const uint32_t q_stride = c.q_heads * c.dim + c.q_pad;
  const uint64_t block_stride = uint64_t{c.block_size} * row + (c.fp8 ? 64 : 0);
  uint32_t used = 0;
  for (int32_t l : c.lens) used += (l + c.block_size - 1) / c.block_size;
  const uint32_t pool_blocks = used + 2;
  const auto ids = shuffled(gen, int32_t(pool_blocks));
  std::vector<int32_t> tables(size_t{seqs} * max_blocks, -1);
  uint32_t next = 0;
  for (uint32_t s = 0; s < seqs; ++s)
    for (uint32_t b = 0; b < (c.lens[s] + c.block_size - 1) / c.block_size; ++b)
      tables[size_t{s} * max_blocks + b] = ids[next++];

  std::vector<bf16_bits> q = random_bf16(gen, size_t{seqs} * q_stride, 0.25f * c.q_gain,
                                         2.0f * c.q_gain);
  const float k_scale = 0.021f, v_scale = 0.033f;
  double max_v = 0;
  std::unique_ptr<BufferPair> kc, vc;
  const size_t pool = pool_blocks * block_stride;
  if (c.fp8) {
    auto k8 = random_fp8(gen, pool, 2.0f, 100.0f);
    auto v8 = random_fp8(gen, pool, 2.0f, 100.0f);
    for (auto x : v8) max_v = std::max(max_v, std::fabs(fp8d(x)) * v_scale);
    kc = std::make_unique<BufferPair>(p, k8);
    vc = std::make_unique<BufferPair>(p, v8);
  } else {
    auto kb = random_bf16(gen, pool);
    auto vb = random_bf16(gen, pool);
    for (auto x : vb) max_v = std::max(max_v, std::fabs(bf16d(x)));
    kc = std::make_unique<BufferPair>(p, kb);
    vc = std::make_unique<BufferPair>(p, vb);
  }
  BufferPair qb(p, q), tb(p, tables), lb(p, c.lens);
  BufferPair out(p, size_t{seqs} * c.q_heads * c.dim * 2);
  const uint32_t max_splits = std::max<uint32_t>(c.splits, ops::kMaxDecodeSplits);
  BufferPair ws(p, ops::paged_decode_workspace_bytes(seqs, c.q_heads, c.dim, max_splits));
  out.poison();
  ws.poison();
  // The split-KV counters start at zero (the partials after them stay
  // poisoned); the op must leave them zero.
  const uint64_t counter_bytes = ops::paged_decode_counter_bytes(ws.bytes());
  REQUIRE_OK(p.gpu.dev->memset(ws.gpu(), 0, counter_bytes));
  REQUIRE_OK(p.cpu.dev->memset(ws.cpu(), 0, counter_bytes));
  const float inv_sqrt_d = 1.0f / std::sqrt(float(c.dim));
  // The GPU runs the op twice on the same workspace, its output poisoned
  // again in between: the second run finds the counters the first left.
  for (int run = 0; run < 3; ++run) {
    const int side = run < 2 ? 0 : 1;
    Side& s = side == 0 ? p.gpu : p.cpu;
    if (run == 1) REQUIRE_OK(p.gpu.dev->memset(out.gpu(), 0xff, out.bytes()));
    if (seed_geometry) {
      const Kernel kern = c.fp8 ? s.k.paged_decode_attn_fp8 : s.k.paged_decode_attn_bf16;
      KernelLaunch l(*s.dev, kern);
      l.grid({c.q_heads, seqs}).block({256});
      l.arg(qb.on(side)).arg(kc->on(side)).arg(vc->on(side)).arg(out.on(side));
      l.arg(tb.on(side)).arg(lb.on(side)).arg(max_blocks).arg(c.q_heads).arg(c.kv_heads);
      l.arg(c.dim).arg(c.block_size).arg(inv_sqrt_d);
      if (c.fp8) l.arg(k_scale).arg(v_scale);
      l.arg(q_stride);
      if (c.fp8) l.arg(block_stride);
      l.arg(c.window);
      REQUIRE_OK(l.launch());
    } else if (c.fp8) {
      REQUIRE_OK(ops::paged_decode_attn_fp8(
          *s.dev, s.k,
          {.q = qb.on(side), .k_cache = kc->on(side), .v_cache = vc->on(side),
           .out = out.on(side), .block_tables = tb.on(side), .seq_lens = lb.on(side),
           .max_blocks_per_seq = max_blocks, .num_seqs = seqs, .num_q_heads = c.q_heads,
           .num_kv_heads = c.kv_heads, .head_dim = c.dim, .block_size = c.block_size,
           .inv_sqrt_d = inv_sqrt_d, .k_scale = k_scale, .v_scale = v_scale,
           .q_stride = q_stride, .cache_stride = block_stride, .sliding_window = c.window,
           .workspace = ws.on(side), .workspace_bytes = ws.bytes(), .num_splits = c.splits}));
    } else {
      REQUIRE_OK(ops::paged_decode_attn_bf16(
          *s.dev, s.k,
          {.q = qb.on(side), .k_cache = kc->on(side), .v_cache = vc->on(side),
           .out = out.on(side), .block_tables = tb.on(side), .seq_lens = lb.on(side),
           .max_blocks_per_seq = max_blocks, .num_seqs = seqs, .num_q_heads = c.q_heads,
           .num_kv_heads = c.kv_heads, .head_dim = c.dim, .block_size = c.block_size,
           .inv_sqrt_d = inv_sqrt_d, .q_stride = q_stride, .sliding_window = c.window,
           .workspace = ws.on(side), .workspace_bytes = ws.bytes(), .num_splits = c.splits}));
    }
  }
  const auto g = out.read<uint16_t>(0), r = out.read<uint16_t>(1);
  {
    const auto ctr = ws.read<uint32_t>(0);
    size_t nonzero = 0;
    for (size_t i = 0; i < counter_bytes / 4; ++i) nonzero += ctr[i] != 0;
    INFO("split-KV counters left non-zero by the GPU: " << nonzero);
    CHECK(nonzero == 0);
  }
  size_t bad = 0, first = 0;
  double worst = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const double a = bf16d(g[i]), b = bf16d(r[i]);
    const double bound = vs_cpu::kPagedDecodeAttn(b, max_v);
    const double err = std::fabs(a - b);
    if (!(err <= bound) && bad++ == 0) first = i;
    worst = std::max(worst, err / bound);
  }
  // Sequences of length 0 get exact zeros.
  size_t nonzero_empty = 0;
  for (uint32_t s = 0; s < seqs; ++s)
    if (c.lens[s] == 0)
      for (size_t i = size_t{s} * c.q_heads * c.dim; i < size_t{s + 1} * c.q_heads * c.dim; ++i)
        nonzero_empty += g[i] != 0;
  INFO(bad << " of " << g.size() << " outputs out of tolerance; first at " << first << " gpu "
           << bf16d(g[first]) << " cpu " << bf16d(r[first]) << "; worst error / bound " << worst);
  CHECK(bad == 0);
  CHECK(nonzero_empty == 0);
  if (c.splits > 1 && !seed_geometry) check_partials(c, ws, counter_bytes, max_v);
}

TEST_CASE("paged decode attention matches the reference over dims, GQA, blocks, windows") {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 gen(seed);
  uint32_t n = 0;
  for (bool fp8 : {false, true})
    for (uint32_t dim : {64u, 128u, 256u})
      for (uint32_t group : {1u, 4u, 8u})
        for (uint32_t block_size : {16u, 32u}) {
          const uint32_t kv_heads = group == 8 ? 2 : 4;
          const uint32_t window = (n % 2 == 1) ? 37 + 61 * (n % 5) : 0;
          // Ragged: empty, one token, block-size edges, several chunks.
          std::vector<int32_t> lens = {0, 1, int32_t(block_size), int32_t(block_size) + 1,
                                       int32_t(50 + gen() % 200), int32_t(600 + gen() % 500)};
          const uint32_t splits = n % 3 == 0 ? 1 : (n % 3 == 1 ? 0 : 5);
          const float gain = n % 4 == 3 ? 6.0f : 1.0f;
          run_decode({fp8, kv_heads * group, kv_heads, dim, block_size, window, lens, splits, gain},
                     gen);
          ++n;
        }
}

TEST_CASE("paged decode attention: GQA groups 2 and 6, generic head_dim, seed geometry") {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 gen(seed);
  for (bool fp8 : {false, true}) {
    // GQA group 2 (one CTA of 2 heads) and 6 (one CTA of 6 heads per KV head).
    run_decode({fp8, 8, 4, 128, 16, 0, {700, 3, 129}, 1, 1.0f}, gen);
    run_decode({fp8, 12, 2, 64, 32, 100, {1000, 0, 64}, 0, 2.0f}, gen);
    // head_dim not a power of two: lanes past it idle.
    run_decode({fp8, 8, 2, 96, 16, 0, {333, 17}, 1, 1.0f}, gen);
    run_decode({fp8, 4, 4, 200, 16, 0, {250, 900}, 4, 1.0f}, gen);
    // One query head per CTA although the group is 4.
    run_decode({fp8, 16, 4, 128, 16, 0, {500, 31, 0}, 1, 1.0f}, gen, /*seed_geometry=*/true);
    // q rows off the 16-byte grid (odd q_stride), one pass and split-merge.
    run_decode({fp8, 32, 8, 128, 16, 0, {300, 77}, 1, 1.0f, 3}, gen);
    run_decode({fp8, 16, 8, 64, 16, 0, {2000, 5}, 8, 1.0f, 5}, gen);
  }
  // Split-merge with more than 8 splits a merging lane (the merge's later
  // chunks): 8 query heads a CTA, one lane a column, in 24 splits, and 4 in 40;
  // the short sequences leave later splits empty.
  run_decode({false, 64, 8, 128, 16, 0, {3000, 40}, 24, 1.0f}, gen);
  run_decode({true, 32, 8, 128, 16, 0, {5000, 100}, 40, 1.0f}, gen);
  // Batch 1, long context: the op splits on its own.
  run_decode({false, 32, 8, 128, 16, 0, {8192}, 0, 1.0f}, gen);
  run_decode({true, 32, 8, 128, 32, 2048, {8000}, 0, 1.0f}, gen);
}

}  // namespace
}  // namespace sparkrt
