// The decode-attention ops on the cpu reference backend against a dense
// float64 softmax over the KV gathered through the block table, from the
// contract in docs/kernels.md (sparkrt/verify). Unused cache slots, block-table
// entries past each sequence and the q row padding hold NaN: reading any of
// them would poison the result. Outputs are poisoned before each run.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <random>
#include <vector>

#include "ops_test_support.h"
#include "sparkrt/verify/float64.h"
#include "sparkrt/verify/tolerances.h"

using namespace opstest;
namespace ops = sparkrt::ops;
namespace verify = sparkrt::verify;
namespace vs_float64 = sparkrt::verify::reference_vs_float64;

namespace {

constexpr bf16_bits kNanBf16 = 0xffff;

enum class CacheType { kBf16, kFp8 };

// A decode problem with a paged cache: ragged sequences whose blocks are
// scattered through the pool in random order.
struct Problem {
  CacheType type = CacheType::kBf16;
  uint32_t num_q_heads = 0, num_kv_heads = 0, dim = 0, block_size = 0, window = 0;
  std::vector<int32_t> lens;
  uint32_t max_blocks = 0;
  uint32_t q_stride = 0;
  uint64_t block_stride = 0;  // elements per cache block
  float k_scale = 1.0f, v_scale = 1.0f;

  std::vector<int32_t> tables;                // [seqs][max_blocks], -1 past the sequence
  std::vector<bf16_bits> q;                   // [seqs][q_stride], NaN padding
  std::vector<bf16_bits> k_bf16, v_bf16;      // pools, NaN where no token lives
  std::vector<fp8_bits> k_fp8, v_fp8;

  uint32_t num_seqs() const { return static_cast<uint32_t>(lens.size()); }
  uint64_t at(uint32_t s, uint32_t t, uint32_t kvh) const {
    const int32_t block = tables[uint64_t{s} * max_blocks + t / block_size];
    return uint64_t(block) * block_stride + (uint64_t{t % block_size} * num_kv_heads + kvh) * dim;
  }
  double k(uint64_t i) const {
    return type == CacheType::kBf16 ? bf16_value(k_bf16[i]) : fp8_value(k_fp8[i]) * k_scale;
  }
  double v(uint64_t i) const {
    return type == CacheType::kBf16 ? bf16_value(v_bf16[i]) : fp8_value(v_fp8[i]) * v_scale;
  }
};

Problem make_problem(std::mt19937_64& gen, CacheType type, uint32_t q_heads, uint32_t kv_heads,
                     uint32_t dim, uint32_t block_size, uint32_t window,
                     std::vector<int32_t> lens) {
  Problem p;
  p.type = type;
  p.num_q_heads = q_heads;
  p.num_kv_heads = kv_heads;
  p.dim = dim;
  p.block_size = block_size;
  p.window = window;
  p.lens = std::move(lens);
  const int32_t longest = *std::max_element(p.lens.begin(), p.lens.end());
  p.max_blocks = static_cast<uint32_t>((longest + block_size - 1) / block_size) + 1;
  p.q_stride = q_heads * dim + 16;
  p.block_stride = uint64_t{block_size} * kv_heads * dim + (type == CacheType::kFp8 ? 64 : 0);
  p.k_scale = type == CacheType::kFp8 ? 0.02f : 1.0f;
  p.v_scale = type == CacheType::kFp8 ? 0.03f : 1.0f;

  uint32_t used = 0;
  for (int32_t len : p.lens) used += (len + block_size - 1) / block_size;
  const auto ids = shuffled_blocks(gen, static_cast<int32_t>(used + 2));  // two spare blocks
  p.tables.assign(uint64_t{p.num_seqs()} * p.max_blocks, -1);
  uint32_t next = 0;
  for (uint32_t s = 0; s < p.num_seqs(); ++s)
    for (uint32_t b = 0; b < (p.lens[s] + block_size - 1) / block_size; ++b)
      p.tables[uint64_t{s} * p.max_blocks + b] = ids[next++];

  p.q = random_bf16(gen, uint64_t{p.num_seqs()} * p.q_stride);
  for (uint32_t s = 0; s < p.num_seqs(); ++s)
    for (uint32_t i = q_heads * dim; i < p.q_stride; ++i)
      p.q[uint64_t{s} * p.q_stride + i] = kNanBf16;

  const uint64_t pool = uint64_t{used + 2} * p.block_stride;
  std::vector<bool> live(pool, false);
  for (uint32_t s = 0; s < p.num_seqs(); ++s)
    for (int32_t t = 0; t < p.lens[s]; ++t)
      for (uint32_t e = 0; e < kv_heads * dim; ++e) live[p.at(s, t, 0) + e] = true;
  if (type == CacheType::kBf16) {
    p.k_bf16 = random_bf16(gen, pool);
    p.v_bf16 = random_bf16(gen, pool);
    for (uint64_t i = 0; i < pool; ++i)
      if (!live[i]) p.k_bf16[i] = p.v_bf16[i] = kNanBf16;
  } else {
    const auto kf = random_bf16(gen, pool), vf = random_bf16(gen, pool);
    p.k_fp8.resize(pool);
    p.v_fp8.resize(pool);
    for (uint64_t i = 0; i < pool; ++i) {
      p.k_fp8[i] = live[i] ? sparkrt::numeric::f32_to_fp8_e4m3(bf16_value(kf[i]) / p.k_scale)
                           : fp8_bits{0x7f};
      p.v_fp8[i] = live[i] ? sparkrt::numeric::f32_to_fp8_e4m3(bf16_value(vf[i]) / p.v_scale)
                           : fp8_bits{0x7f};
    }
  }
  return p;
}

// Dense softmax attention in float64 (sparkrt/verify/float64.h) over each
// sequence's window.
std::vector<double> attention_f64(const Problem& p, double inv_sqrt_d) {
  std::vector<double> out(uint64_t{p.num_seqs()} * p.num_q_heads * p.dim, 0.0);
  const uint32_t group = p.num_q_heads / p.num_kv_heads;
  for (uint32_t s = 0; s < p.num_seqs(); ++s) {
    const uint32_t len = p.lens[s];
    const uint32_t first = p.window != 0 && len > p.window ? len - p.window : 0;
    for (uint32_t h = 0; h < p.num_q_heads; ++h) {
      std::vector<double> q(p.dim);
      for (uint32_t d = 0; d < p.dim; ++d)
        q[d] = bf16_value(p.q[uint64_t{s} * p.q_stride + h * p.dim + d]);
      const uint32_t kvh = h / group;
      const auto o = verify::attention(
          q, len - first, p.dim, inv_sqrt_d,
          [&](uint32_t t, uint32_t d) { return p.k(p.at(s, first + t, kvh) + d); },
          [&](uint32_t t, uint32_t d) { return p.v(p.at(s, first + t, kvh) + d); });
      std::copy(o.begin(), o.end(), out.begin() + (uint64_t{s} * p.num_q_heads + h) * p.dim);
    }
  }
  return out;
}

// The partials of `n` forced splits in the op's workspace (docs/kernels.md,
// "Split-KV") against float64 from the contract: split z of a window
// [first, len) takes [a + z per, a + (z + 1) per) clamped to it, a = first
// rounded down to 16, per = 16 ceil((len - a) / (16 n)); it holds the max m
// of its scores in base 2, l = sum 2^(x - m) and acc = sum 2^(x - m) V, or
// (-inf, 0, zeros) when empty. Sums are compared at the reference's max.
void check_split_partials(const Problem& p, const std::vector<float>& ws, uint64_t ws_bytes,
                          uint32_t n, double inv_sqrt_d, double vmax) {
  const uint32_t group = p.num_q_heads / p.num_kv_heads;
  const uint64_t parts = uint64_t{p.num_seqs()} * p.num_q_heads * n;
  const uint64_t acc_at = ops::paged_decode_counter_bytes(ws_bytes) / 4;
  const uint64_t ml_at = acc_at + (parts * p.dim * 4 + 255) / 256 * 256 / 4;
  REQUIRE(ws.size() >= ml_at + 2 * parts);
  uint64_t bad = 0;
  for (uint32_t s = 0; s < p.num_seqs(); ++s) {
    const uint64_t len = p.lens[s];
    const uint64_t first = p.window != 0 && len > p.window ? len - p.window : 0;
    const uint64_t a = first / 16 * 16;
    const uint64_t per = 16 * ((len - a + 16 * n - 1) / (16 * n));
    for (uint32_t h = 0; h < p.num_q_heads; ++h)
      for (uint32_t z = 0; z < n; ++z) {
        const uint64_t b = std::clamp(a + z * per, first, len);
        const uint64_t e = std::clamp(a + (z + 1) * per, b, len);
        std::vector<double> x;
        for (uint64_t t = b; t < e; ++t) {
          double dot = 0;
          for (uint32_t d = 0; d < p.dim; ++d)
            dot += bf16_value(p.q[uint64_t{s} * p.q_stride + h * p.dim + d]) *
                   p.k(p.at(s, uint32_t(t), h / group) + d);
          x.push_back(dot * inv_sqrt_d * std::numbers::log2e);
        }
        const uint64_t part = (uint64_t{s} * p.num_q_heads + h) * n + z;
        const double m_got = ws[ml_at + 2 * part], l_got = ws[ml_at + 2 * part + 1];
        const float* acc = &ws[acc_at + part * p.dim];
        bool ok = true;
        if (x.empty()) {
          ok = m_got == -INFINITY && l_got == 0;
          for (uint32_t d = 0; d < p.dim; ++d) ok = ok && acc[d] == 0;
        } else {
          const double m = *std::max_element(x.begin(), x.end());
          double l = 0;
          for (double xi : x) l += std::exp2(xi - m);
          const double f = std::exp2(m_got - m);
          ok = std::fabs(m_got - m) <= vs_float64::kSplitMaxAbs &&
               std::fabs(l_got * f - l) <= vs_float64::kSplitSumRel * l;
          for (uint32_t d = 0; ok && d < p.dim; ++d) {
            double o = 0;
            for (uint64_t t = b; t < e; ++t)
              o += std::exp2(x[t - b] - m) * p.v(p.at(s, uint32_t(t), h / group) + d);
            ok = std::fabs(acc[d] * f - o) <= vs_float64::kSplitAcc(o, l * vmax);
          }
        }
        if (!ok && bad++ < 8)
          FAIL_CHECK("split ", z, " of sequence ", s, " head ", h, " (tokens ", b, "..", e,
                     "): (max, sum) (", m_got, ", ", l_got, ")");
      }
  }
  CHECK(bad == 0);
}

// Runs the op for `p` on the cpu device and checks it against float64:
// |out - ref| <= 2^-8 |ref| + 1e-4 max|V| (docs/kernels.md), and with forced
// splits each split's partials too.
void run_and_check(sparkrt::Device& dev, const ops::PagedAttentionKernels& k, const Problem& p,
                   uint32_t num_splits, uint32_t expect_splits) {
  const float inv_sqrt_d = 1.0f / std::sqrt(static_cast<float>(p.dim));
  Buffer dq(dev, p.q), dtables(dev, p.tables), dlens(dev, p.lens);
  const bool bf16 = p.type == CacheType::kBf16;
  Buffer dk = bf16 ? Buffer(dev, p.k_bf16) : Buffer(dev, p.k_fp8);
  Buffer dv = bf16 ? Buffer(dev, p.v_bf16) : Buffer(dev, p.v_fp8);
  const uint64_t out_elems = uint64_t{p.num_seqs()} * p.num_q_heads * p.dim;
  Buffer dout(dev, out_elems * 2);
  dout.poison();
  const uint64_t ws_bytes = ops::paged_decode_workspace_bytes(p.num_seqs(), p.num_q_heads, p.dim);
  Buffer ws(dev, ws_bytes);
  ws.poison();
  // The split-KV counters must be zero (the partials after them stay poisoned).
  REQUIRE_OK(dev.memset(ws, 0, ops::paged_decode_counter_bytes(ws_bytes)));
  if (bf16) {
    const ops::PagedDecodeAttnArgs a{.q = dq,
                                     .k_cache = dk,
                                     .v_cache = dv,
                                     .out = dout,
                                     .block_tables = dtables,
                                     .seq_lens = dlens,
                                     .max_blocks_per_seq = p.max_blocks,
                                     .num_seqs = p.num_seqs(),
                                     .num_q_heads = p.num_q_heads,
                                     .num_kv_heads = p.num_kv_heads,
                                     .head_dim = p.dim,
                                     .block_size = p.block_size,
                                     .inv_sqrt_d = inv_sqrt_d,
                                     .q_stride = p.q_stride,
                                     .sliding_window = p.window,
                                     .workspace = ws,
                                     .workspace_bytes = ws_bytes,
                                     .num_splits = num_splits};
    auto plan = ops::plan_paged_decode(dev, a);
    REQUIRE_MESSAGE(plan.ok(), plan.status().ToString());
    CHECK(plan->num_splits == expect_splits);
    REQUIRE_OK(ops::paged_decode_attn_bf16(dev, k, a));
  } else {
    const ops::PagedDecodeAttnFp8Args a{.q = dq,
                                        .k_cache = dk,
                                        .v_cache = dv,
                                        .out = dout,
                                        .block_tables = dtables,
                                        .seq_lens = dlens,
                                        .max_blocks_per_seq = p.max_blocks,
                                        .num_seqs = p.num_seqs(),
                                        .num_q_heads = p.num_q_heads,
                                        .num_kv_heads = p.num_kv_heads,
                                        .head_dim = p.dim,
                                        .block_size = p.block_size,
                                        .inv_sqrt_d = inv_sqrt_d,
                                        .k_scale = p.k_scale,
                                        .v_scale = p.v_scale,
                                        .q_stride = p.q_stride,
                                        .cache_stride = p.block_stride,
                                        .sliding_window = p.window,
                                        .workspace = ws,
                                        .workspace_bytes = ws_bytes,
                                        .num_splits = num_splits};
    auto plan = ops::plan_paged_decode(dev, a);
    REQUIRE_MESSAGE(plan.ok(), plan.status().ToString());
    CHECK(plan->num_splits == expect_splits);
    REQUIRE_OK(ops::paged_decode_attn_fp8(dev, k, a));
  }
  const auto got = dout.download<bf16_bits>();
  const auto ref = attention_f64(p, inv_sqrt_d);
  double vmax = 0;
  for (uint64_t i = 0; i < (bf16 ? p.v_bf16.size() : p.v_fp8.size()); ++i)
    if (!std::isnan(p.v(i))) vmax = std::max(vmax, std::fabs(p.v(i)));
  uint64_t bad = 0;
  for (uint64_t i = 0; i < out_elems; ++i) {
    const double g = bf16_value(got[i]);
    const double tol = vs_float64::kPagedDecodeAttn(ref[i], vmax);
    if (!(std::fabs(g - ref[i]) <= tol) && bad++ < 8)
      FAIL_CHECK("out[", i, "] = ", g, ", float64 ", ref[i]);
  }
  CHECK(bad == 0);
  if (num_splits > 1)
    check_split_partials(p, ws.download<float>(), ws_bytes, num_splits, inv_sqrt_d, vmax);
}

}  // namespace

TEST_CASE("ops cpu: paged_decode_attn_bf16 over shapes, GQA ratios, block sizes and windows") {
  auto dev = open_device("cpu");
  const auto k = resolve<ops::PagedAttentionKernels>(*dev);
  const uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  std::mt19937_64 gen(seed);
  for (uint32_t dim : {64u, 128u, 256u})
    for (uint32_t ratio : {1u, 4u, 8u})
      for (uint32_t block_size : {16u, 32u})
        for (uint32_t window : {0u, 40u}) {
          CAPTURE(dim);
          CAPTURE(ratio);
          CAPTURE(block_size);
          CAPTURE(window);
          // Ragged: one token, none (zeros out), a partial block, several blocks.
          const Problem p = make_problem(gen, CacheType::kBf16, 2 * ratio, 2, dim, block_size,
                                         window, {1, 0, 77, 150});
          run_and_check(*dev, k, p, /*num_splits=*/1, /*expect_splits=*/1);
        }
}

TEST_CASE("ops cpu: paged_decode_attn_fp8 with scales and a padded pool") {
  auto dev = open_device("cpu");
  const auto k = resolve<ops::PagedAttentionKernels>(*dev);
  const uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  std::mt19937_64 gen(seed);
  for (uint32_t dim : {64u, 128u, 256u})
    for (uint32_t ratio : {1u, 4u, 8u})
      for (uint32_t window : {0u, 33u}) {
        CAPTURE(dim);
        CAPTURE(ratio);
        CAPTURE(window);
        const uint32_t block_size = ratio == 4 ? 32 : 16;
        const Problem p = make_problem(gen, CacheType::kFp8, 2 * ratio, 2, dim, block_size,
                                       window, {90, 3, 0, 64});
        run_and_check(*dev, k, p, 1, 1);
      }
}

TEST_CASE("ops cpu: split-KV decode (split + combine) equals the dense softmax") {
  auto dev = open_device("cpu");
  const auto k = resolve<ops::PagedAttentionKernels>(*dev);
  const uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  std::mt19937_64 gen(seed);
  for (CacheType type : {CacheType::kBf16, CacheType::kFp8})
    for (uint32_t splits : {2u, 5u, 64u})  // 64: most splits of the short sequences are empty
      for (uint32_t window : {0u, 100u}) {
        CAPTURE(int(type));
        CAPTURE(splits);
        CAPTURE(window);
        const Problem p =
            make_problem(gen, type, 8, 2, 128, 16, window, {300, 0, 1, 37, 129});
        run_and_check(*dev, k, p, splits, splits);
      }
}

TEST_CASE("ops cpu: the decode op splits by itself when its CTAs cannot fill the device") {
  // The cpu device reports one multiprocessor. A single sequence with one
  // CTA of 4 heads fills it, so it splits only where that CTA would read a
  // long split (2 MB of bf16 K and V: 8192 tokens of 256 bytes at head_dim
  // 64, counted over the block table's capacity), in two, one per resident
  // CTA slot; two sequences are two CTAs.
  auto dev = open_device("cpu");
  const auto k = resolve<ops::PagedAttentionKernels>(*dev);
  const uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  std::mt19937_64 gen(seed);
  const Problem p = make_problem(gen, CacheType::kBf16, 4, 1, 64, 16, 0, {8192});
  run_and_check(*dev, k, p, /*num_splits=*/0, /*expect_splits=*/2);
  const Problem short_one = make_problem(gen, CacheType::kBf16, 4, 1, 64, 16, 0, {8160});
  run_and_check(*dev, k, short_one, 0, 1);
  const Problem two = make_problem(gen, CacheType::kBf16, 4, 1, 64, 16, 0, {8192, 200});
  run_and_check(*dev, k, two, 0, 1);  // two CTAs: no split
}

TEST_CASE("ops cpu: decode with undersized buffers or lengths past the table is an error") {
  auto dev = open_device("cpu");
  const auto k = resolve<ops::PagedAttentionKernels>(*dev);
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed << " (replay: --set-env=SPARKRT_TEST_SEED=" << seed << ")");
  std::mt19937_64 gen(seed);
  const Problem p = make_problem(gen, CacheType::kBf16, 4, 2, 64, 16, 0, {20, 33});
  Buffer dq(*dev, p.q), dtables(*dev, p.tables), dlens(*dev, p.lens);
  Buffer dk(*dev, p.k_bf16), dv(*dev, p.v_bf16);
  const uint64_t out_bytes = uint64_t{p.num_seqs()} * p.num_q_heads * p.dim * 2;
  Buffer dout(*dev, out_bytes);
  const ops::PagedDecodeAttnArgs good{.q = dq,
                                      .k_cache = dk,
                                      .v_cache = dv,
                                      .out = dout,
                                      .block_tables = dtables,
                                      .seq_lens = dlens,
                                      .max_blocks_per_seq = p.max_blocks,
                                      .num_seqs = p.num_seqs(),
                                      .num_q_heads = p.num_q_heads,
                                      .num_kv_heads = p.num_kv_heads,
                                      .head_dim = p.dim,
                                      .block_size = p.block_size,
                                      .inv_sqrt_d = 0.125f,
                                      .q_stride = p.q_stride};
  REQUIRE_OK(ops::paged_decode_attn_bf16(*dev, k, good));
  const auto refused = [&](const ops::PagedDecodeAttnArgs& a, const char* operand) {
    CAPTURE(operand);
    const absl::Status s = ops::paged_decode_attn_bf16(*dev, k, a);
    INFO(s.ToString());
    CHECK_FALSE(s.ok());
    CHECK(contains(s, operand));
    CHECK(contains(s, "paged_decode_attn_bf16"));
  };
  Buffer short_out(*dev, out_bytes - 2);
  ops::PagedDecodeAttnArgs a = good;
  a.out = short_out;
  refused(a, "out");
  // The second sequence's 33rd token is in its third table entry.
  Buffer short_tables(*dev, (p.max_blocks + 2) * sizeof(int32_t));
  a = good;
  a.block_tables = short_tables;
  refused(a, "block_tables");
  Buffer short_q(*dev, (uint64_t{p.q_stride} + p.num_q_heads * p.dim) * 2 - 2);
  a = good;
  a.q = short_q;
  refused(a, "q");
  // A length beyond max_blocks_per_seq * block_size.
  const std::vector<int32_t> long_lens = {20, static_cast<int32_t>(p.max_blocks * 16 + 1)};
  Buffer dlong(*dev, long_lens);
  a = good;
  a.seq_lens = dlong;
  refused(a, "seq_lens");
}
