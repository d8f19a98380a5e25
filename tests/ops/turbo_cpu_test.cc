// The TurboQuant cache ops on the cpu backend (the references) against an
// independent float64 reading of the format in docs/kernels.md ("TurboQuant
// V cache"): the test unpacks the bytes itself, recomputes each group's
// nearest centroids and matched-norm scale in float64, and runs attention in
// float64 over the V it decoded. Random non-zero inputs, pools poisoned
// (0xff) first, negative slots, ragged lengths, GQA 1/4/8, head_dim
// 64/128/256, blocks of 16 and 32, sliding windows, forced splits. Also the
// format's quality, whose figures docs/kernels.md quotes: the quantization
// MSE of each bit width on Gaussian data, and the attention error with and
// without the rotation on V with outlier channels.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "ops_test_support.h"
#include "sparkrt/ops/turbo_kv_cache.h"
#include "sparkrt/ops/turbo_paged_attention.h"
#include "sparkrt/verify/float64.h"
#include "sparkrt/verify/tolerances.h"

using namespace opstest;
namespace ops = sparkrt::ops;
namespace verify = sparkrt::verify;
namespace vs_float64 = sparkrt::verify::reference_vs_float64;

namespace {

// The codebooks as docs/kernels.md lists them (ascending).
std::vector<double> codebook(uint32_t bits) {
  if (bits == 2) return {-1.5104, -0.4528, 0.4528, 1.5104};
  if (bits == 3) return {-2.1520, -1.3440, -0.7560, -0.2451, 0.2451, 0.7560, 1.3440, 2.1520};
  return {-2.7326, -2.0690, -1.6180, -1.2562, -0.9423, -0.6568, -0.3880, -0.1284,
          0.1284,  0.3880,  0.6568,  0.9423,  1.2562,  1.6180,  2.0690,  2.7326};
}

// Index i of a little-endian bit stream of `bits`-bit fields.
uint32_t field(const uint8_t* p, uint32_t bits, uint64_t i) {
  uint32_t v = 0;
  for (uint32_t b = 0; b < bits; ++b) {
    const uint64_t bit = i * bits + b;
    v |= uint32_t((p[bit / 8] >> (bit % 8)) & 1u) << b;
  }
  return v;
}

struct Shape {
  uint32_t bits, heads, dim, block_size, blocks;
  uint64_t row() const { return uint64_t{heads} * dim; }
  uint64_t k_block() const { return uint64_t{block_size} * row() * 2; }
  uint64_t v_data() const { return uint64_t{block_size} * row() * bits / 8; }
  uint64_t v_block() const { return v_data() + uint64_t{block_size} * row() / 16; }
};

// The value the format stores for dim j of head h at slot `slot`, decoded by
// the test from the pool's bytes.
double stored_v(const std::vector<uint8_t>& vc, const Shape& s, uint64_t slot, uint32_t h,
                uint32_t j) {
  const uint64_t b = slot / s.block_size, o = slot % s.block_size;
  const uint8_t* data = vc.data() + b * s.v_block() + o * s.row() * s.bits / 8;
  const uint64_t v = uint64_t{h} * s.dim + j;
  const uint8_t scale = vc[b * s.v_block() + s.v_data() + o * s.row() / 16 + v / 16];
  return codebook(s.bits)[field(data, s.bits, v)] * fp8_value(scale);
}

// A TurboQuant cache on the cpu device, written through the op.
struct Cache {
  Shape s;
  Buffer kc, vc;
  Cache(sparkrt::Device& dev, const Shape& shape)
      : s(shape), kc(dev, s.blocks * s.k_block()), vc(dev, s.blocks * s.v_block()) {
    kc.poison();
    vc.poison();
  }
};

absl::Status write(sparkrt::Device& dev, const ops::TurboKvCacheKernels& k, Cache& c,
                   const Buffer& key, const Buffer& value, const Buffer& slots, uint32_t tokens,
                   uint32_t key_stride, uint32_t value_stride) {
  const ops::ReshapeAndCacheTurboArgs a{.key = key,
                                        .value = value,
                                        .k_cache = c.kc,
                                        .v_cache = c.vc,
                                        .slot_mapping = slots,
                                        .num_tokens = tokens,
                                        .num_kv_heads = c.s.heads,
                                        .head_dim = c.s.dim,
                                        .block_size = c.s.block_size,
                                        .key_stride = key_stride,
                                        .value_stride = value_stride,
                                        .k_block_stride_bytes = c.s.k_block(),
                                        .v_block_stride_bytes = c.s.v_block(),
                                        .v_data_section_bytes = c.s.v_data()};
  if (c.s.bits == 2) return ops::reshape_and_cache_bf16k_turbo2v(dev, k, a);
  if (c.s.bits == 3) return ops::reshape_and_cache_bf16k_turbo3v(dev, k, a);
  return ops::reshape_and_cache_bf16k_turbo4v(dev, k, a);
}

// Distinct slots for `n` tokens over the pool, about 1 in 8 negative (skipped).
std::vector<int64_t> random_slots(std::mt19937_64& gen, uint32_t n, uint64_t capacity) {
  std::vector<int64_t> all(capacity);
  for (uint64_t i = 0; i < capacity; ++i) all[i] = int64_t(i);
  std::shuffle(all.begin(), all.end(), gen);
  all.resize(n);
  for (auto& x : all)
    if (gen() % 8 == 0) x = -1;
  return all;
}

}  // namespace

TEST_CASE("turbo cache writes: K raw, V's indices and scales as the format says (cpu)") {
  auto dev = open_device("cpu");
  const auto k = resolve<ops::TurboKvCacheKernels>(*dev);
  std::mt19937_64 gen(fresh_seed());
  for (uint32_t bits : {2u, 3u, 4u})
    for (const auto& [heads, dim, block_size] :
         {std::tuple{1u, 64u, 16u}, std::tuple{4u, 128u, 32u}, std::tuple{2u, 256u, 16u},
          std::tuple{3u, 48u, 5u}}) {
      CAPTURE(bits);
      CAPTURE(dim);
      const Shape s{bits, heads, dim, block_size, 7};
      const uint32_t tokens = std::min(40u, s.blocks * block_size);
      const uint32_t key_stride = uint32_t(s.row()) + 8, value_stride = uint32_t(s.row()) * 2;
      const auto key = random_bf16(gen, uint64_t{tokens} * key_stride);
      auto value = random_bf16(gen, uint64_t{tokens} * value_stride, 0.001f, 3.0f);
      // One all-zero group and one tiny one exercise the fallback scale.
      std::fill_n(value.begin(), 16, sparkrt::numeric::f32_to_bf16(0.0f));
      std::fill_n(value.begin() + 16, 16, sparkrt::numeric::f32_to_bf16(1e-30f));
      const auto slots = random_slots(gen, tokens, uint64_t{s.blocks} * block_size);
      Buffer kb(*dev, key), vb(*dev, value), sb(*dev, slots);
      Cache c(*dev, s);
      REQUIRE_OK(write(*dev, k, c, kb, vb, sb, tokens, key_stride, value_stride));
      const auto kc = c.kc.download<uint8_t>();
      const auto vc = c.vc.download<uint8_t>();
      std::vector<bool> k_written(kc.size()), v_written(vc.size());
      const std::vector<double> cb = codebook(bits);
      uint64_t groups = 0, ties = 0;
      for (uint32_t t = 0; t < tokens; ++t) {
        if (slots[t] < 0) continue;
        const uint64_t b = uint64_t(slots[t]) / block_size, o = uint64_t(slots[t]) % block_size;
        const uint64_t k_at = b * s.k_block() + o * s.row() * 2;
        for (uint64_t i = 0; i < s.row() * 2; ++i) {
          k_written[k_at + i] = true;
          REQUIRE(kc[k_at + i] == reinterpret_cast<const uint8_t*>(key.data())[uint64_t{t} * key_stride * 2 + i]);
        }
        const uint64_t data_at = b * s.v_block() + o * s.row() * bits / 8;
        const uint64_t scale_at = b * s.v_block() + s.v_data() + o * s.row() / 16;
        for (uint64_t i = 0; i < s.row() * bits / 8; ++i) v_written[data_at + i] = true;
        for (uint64_t g = 0; g < s.row() / 16; ++g) {
          v_written[scale_at + g] = true;
          ++groups;
          double x[16], absmax = 0, norm_x = 0, norm_c = 0;
          for (int i = 0; i < 16; ++i) {
            x[i] = bf16_value(value[uint64_t{t} * value_stride + g * 16 + i]);
            absmax = std::max(absmax, std::fabs(x[i]));
            norm_x += x[i] * x[i];
          }
          for (uint32_t i = 0; i < 16; ++i) {
            const uint32_t idx = field(vc.data() + data_at, bits, g * 16 + i);
            REQUIRE(idx < cb.size());
            norm_c += cb[idx] * cb[idx];
            // The nearest centroid of y = x / absmax * outer (upper on a bound);
            // values within 1e-5 of a bound may fall either way in f32.
            const double y = absmax > 0 ? x[i] / absmax * cb.back() : 0.0;
            uint32_t want = 0;
            bool near_bound = false;
            for (uint32_t j = 0; j + 1 < cb.size(); ++j) {
              const double bound = (cb[j] + cb[j + 1]) / 2;
              if (y >= bound) want = j + 1;
              near_bound |= std::fabs(y - bound) < 1e-5;
            }
            if (near_bound) {
              ++ties;
              continue;
            }
            REQUIRE(idx == want);
          }
          // The matched norm (or absmax / outer for a zero or tiny group),
          // within E4M3's half step.
          const double exact = norm_x > 1e-60 ? std::sqrt(norm_x / norm_c) : absmax / cb.back();
          const double stored = fp8_value(vc[scale_at + g]);
          INFO("token " << t << " group " << g << ": scale " << stored << ", matched norm " << exact);
          CHECK(std::fabs(stored - std::min(exact, 448.0)) <= fp8_ulp(exact) / 2 + 1e-12);
        }
      }
      MESSAGE(bits << "-bit, head_dim " << dim << ": " << groups << " groups checked, " << ties
                   << " values within 1e-5 of a bound");
      for (size_t i = 0; i < kc.size(); ++i)
        if (!k_written[i]) REQUIRE(kc[i] == 0xff);
      for (size_t i = 0; i < vc.size(); ++i)
        if (!v_written[i]) REQUIRE(vc[i] == 0xff);
    }
}

TEST_CASE("hadamard_transform_bf16 is the normalized Walsh-Hadamard transform, its own inverse (cpu)") {
  auto dev = open_device("cpu");
  const auto k = resolve<ops::TurboKvCacheKernels>(*dev);
  std::mt19937_64 gen(fresh_seed());
  for (uint32_t d : {64u, 128u, 256u, 512u}) {
    CAPTURE(d);
    const uint32_t tokens = 5, heads = 3, stride = heads * d + 16;
    const auto x = random_bf16(gen, uint64_t{tokens} * stride);
    Buffer in(*dev, x), out(*dev, x.size() * 2), back(*dev, x.size() * 2);
    out.poison();
    back.poison();
    const ops::HadamardArgs a{.in = in, .out = out, .num_tokens = tokens, .num_heads = heads,
                              .head_dim = d, .in_stride = stride, .out_stride = stride};
    REQUIRE_OK(ops::hadamard_transform_bf16(*dev, k, a));
    ops::HadamardArgs again = a;
    again.in = out;
    again.out = back;
    REQUIRE_OK(ops::hadamard_transform_bf16(*dev, k, again));
    const auto y = out.download<bf16_bits>(), z = back.download<bf16_bits>();
    for (uint32_t t = 0; t < tokens; ++t)
      for (uint32_t h = 0; h < heads; ++h) {
        const uint64_t r = uint64_t{t} * stride + uint64_t{h} * d;
        double max_in = 0;
        for (uint32_t i = 0; i < d; ++i) max_in = std::max(max_in, std::fabs(bf16_value(x[r + i])));
        for (uint32_t i = 0; i < d; ++i) {
          double exact = 0;  // H[i][j] = (-1)^popcount(i & j)
          for (uint32_t j = 0; j < d; ++j)
            exact += (__builtin_popcount(i & j) % 2 ? -1.0 : 1.0) * bf16_value(x[r + j]);
          exact /= std::sqrt(double(d));
          CHECK(std::fabs(bf16_value(y[r + i]) - exact) <= 0x1p-8 * std::fabs(exact) + 1e-5 * max_in);
          // Twice: x again, within two bf16 roundings.
          CHECK(std::fabs(bf16_value(z[r + i]) - bf16_value(x[r + i])) <=
                0x1p-7 * std::fabs(bf16_value(x[r + i])) + 0x1p-8 * max_in);
        }
      }
    // The padding between rows is not written.
    for (uint32_t t = 0; t < tokens; ++t)
      for (uint32_t i = heads * d; i < stride; ++i) CHECK(y[uint64_t{t} * stride + i] == 0xffff);
  }
}

TEST_CASE("turbo decode attention matches float64 attention over the stored V (cpu)") {
  auto dev = open_device("cpu");
  const auto wk = resolve<ops::TurboKvCacheKernels>(*dev);
  const auto dk = resolve<ops::TurboPagedAttentionKernels>(*dev);
  std::mt19937_64 gen(fresh_seed());
  struct Case {
    uint32_t bits, q_heads, kv_heads, dim, block_size, window, splits;
  };
  for (const Case& cs : {Case{4, 8, 8, 64, 16, 0, 0}, Case{3, 16, 4, 128, 32, 0, 0},
                         Case{2, 32, 4, 128, 16, 50, 0}, Case{4, 16, 2, 256, 16, 0, 3},
                         Case{3, 8, 1, 128, 32, 0, 5}, Case{2, 64, 8, 64, 32, 100, 4}}) {
    CAPTURE(cs.bits);
    CAPTURE(cs.q_heads);
    CAPTURE(cs.dim);
    CAPTURE(cs.splits);
    const std::vector<int32_t> lens = {0, 1, 17, 150, 333};
    const uint32_t seqs = uint32_t(lens.size()), max_blocks = 333 / cs.block_size + 2;
    const Shape s{cs.bits, cs.kv_heads, cs.dim, cs.block_size, seqs * max_blocks};
    // Every sequence's table: distinct shuffled blocks.
    const auto ids = shuffled_blocks(gen, int32_t(s.blocks));
    std::vector<int32_t> tables(ids.begin(), ids.end());
    // Fill the whole pool through the write op: token t of sequence q at its slot.
    const uint32_t tokens = s.blocks * cs.block_size;
    std::vector<int64_t> slots(tokens);
    for (uint32_t i = 0; i < tokens; ++i) slots[i] = i;
    const auto key = random_bf16(gen, uint64_t{tokens} * s.row());
    const auto value = random_bf16(gen, uint64_t{tokens} * s.row(), 0.01f, 2.0f);
    Buffer kb(*dev, key), vb(*dev, value), sb(*dev, slots);
    Cache c(*dev, s);
    REQUIRE_OK(write(*dev, wk, c, kb, vb, sb, tokens, uint32_t(s.row()), uint32_t(s.row())));
    const auto vc = c.vc.download<uint8_t>();
    const uint32_t q_stride = cs.q_heads * cs.dim + 8;
    const auto q = random_bf16(gen, uint64_t{seqs} * q_stride);
    Buffer qb(*dev, q), tb(*dev, tables), lb(*dev, lens), out(*dev, uint64_t{seqs} * cs.q_heads * cs.dim * 2);
    out.poison();
    auto ws = ops::DecodeWorkspace::create(*dev, seqs, cs.q_heads, cs.dim);
    REQUIRE_OK(ws.status());
    const ops::PagedDecodeAttnTurboArgs a{
        .q = qb, .k_cache = c.kc, .v_cache = c.vc, .out = out, .block_tables = tb,
        .seq_lens = lb, .max_blocks_per_seq = max_blocks, .num_seqs = seqs,
        .num_q_heads = cs.q_heads, .num_kv_heads = cs.kv_heads, .head_dim = cs.dim,
        .block_size = cs.block_size, .inv_sqrt_d = float(1 / std::sqrt(double(cs.dim))),
        .q_stride = q_stride, .v_block_stride_bytes = s.v_block(),
        .v_data_section_bytes = s.v_data(), .sliding_window = cs.window,
        .workspace = ws->ptr(), .workspace_bytes = ws->bytes(),
        .num_splits = cs.splits == 0 ? 1 : cs.splits};
    const absl::Status st = cs.bits == 2   ? ops::paged_decode_attn_bf16k_turbo2v(*dev, dk, a)
                            : cs.bits == 3 ? ops::paged_decode_attn_bf16k_turbo3v(*dev, dk, a)
                                           : ops::paged_decode_attn_bf16k_turbo4v(*dev, dk, a);
    REQUIRE_OK(st);
    const auto got = out.download<bf16_bits>();
    for (uint32_t sq = 0; sq < seqs; ++sq) {
      const uint32_t len = uint32_t(lens[sq]);
      const uint32_t first = cs.window > 0 && len > cs.window ? len - cs.window : 0;
      for (uint32_t h = 0; h < cs.q_heads; ++h) {
        const uint32_t kvh = h / (cs.q_heads / cs.kv_heads);
        auto slot_of = [&](uint32_t t) {
          const uint32_t pos = first + t;
          return uint64_t(tables[uint64_t{sq} * max_blocks + pos / cs.block_size]) * cs.block_size +
                 pos % cs.block_size;
        };
        std::vector<double> qh(cs.dim);
        for (uint32_t j = 0; j < cs.dim; ++j)
          qh[j] = bf16_value(q[uint64_t{sq} * q_stride + uint64_t{h} * cs.dim + j]);
        double max_v = 0;
        const auto ref = verify::attention(
            qh, len - first, cs.dim, 1 / std::sqrt(double(cs.dim)),
            [&](uint32_t t, uint32_t j) {
              return bf16_value(key[slot_of(t) * s.row() + uint64_t{kvh} * cs.dim + j]);
            },
            [&](uint32_t t, uint32_t j) {
              const double v = stored_v(vc, s, slot_of(t), kvh, j);
              max_v = std::max(max_v, std::fabs(v));
              return v;
            });
        for (uint32_t j = 0; j < cs.dim; ++j) {
          const double g = bf16_value(got[(uint64_t{sq} * cs.q_heads + h) * cs.dim + j]);
          INFO("seq " << sq << " (len " << len << ") head " << h << " dim " << j << ": got " << g
                      << " want " << ref[j]);
          REQUIRE(std::fabs(g - ref[j]) <= vs_float64::kPagedDecodeAttn(ref[j], max_v));
        }
      }
    }
  }
}

TEST_CASE("TurboQuant quality: quantization MSE on Gaussian data, and what the rotation buys") {
  auto dev = open_device("cpu");
  const auto wk = resolve<ops::TurboKvCacheKernels>(*dev);
  std::mt19937_64 gen(fresh_seed());
  std::normal_distribution<double> normal(0.0, 1.0);
  // MSE per unit variance over 524288 Gaussian values per width, next to the
  // Lloyd-Max optimum for N(0, 1) at a known variance; the per-group scale
  // (half a bit per value) takes 3 and 4 bits below it.
  const double optimum[] = {0.1175, 0.03454, 0.009497};
  const double limit[] = {0.135, 0.026, 0.0063};  // docs/kernels.md, "Quality"
  for (uint32_t bits : {2u, 3u, 4u}) {
    const Shape s{bits, 8, 128, 16, 32};
    const uint32_t tokens = s.blocks * s.block_size;
    std::vector<bf16_bits> v(uint64_t{tokens} * s.row());
    for (auto& x : v) x = sparkrt::numeric::f32_to_bf16(float(normal(gen)));
    std::vector<int64_t> slots(tokens);
    for (uint32_t i = 0; i < tokens; ++i) slots[i] = i;
    Buffer kb(*dev, v), vb(*dev, v), sb(*dev, slots);
    Cache c(*dev, s);
    REQUIRE_OK(write(*dev, wk, c, kb, vb, sb, tokens, uint32_t(s.row()), uint32_t(s.row())));
    const auto vc = c.vc.download<uint8_t>();
    double err = 0, var = 0;
    for (uint32_t t = 0; t < tokens; ++t)
      for (uint32_t h = 0; h < s.heads; ++h)
        for (uint32_t j = 0; j < s.dim; ++j) {
          const double x = bf16_value(v[uint64_t{t} * s.row() + h * s.dim + j]);
          const double d = stored_v(vc, s, t, h, j) - x;
          err += d * d;
          var += x * x;
        }
    const double mse = err / var;
    MESSAGE(bits << "-bit: MSE per unit variance " << mse << " (Lloyd-Max optimum "
                 << optimum[bits - 2] << ")");
    CHECK(mse <= limit[bits - 2]);
  }
}

TEST_CASE("TurboQuant quality: attention error with and without the rotation, Gaussian and outlier V") {
  auto dev = open_device("cpu");
  const auto wk = resolve<ops::TurboKvCacheKernels>(*dev);
  const auto dk = resolve<ops::TurboPagedAttentionKernels>(*dev);
  std::mt19937_64 gen(fresh_seed());
  std::normal_distribution<double> normal(0.0, 1.0);
  const uint32_t q_heads = 16, kv_heads = 4, dim = 128, block = 16, len = 1024;
  const uint32_t blocks = len / block, row = kv_heads * dim;
  std::vector<int64_t> slots(len);
  std::vector<int32_t> table(blocks);
  for (uint32_t i = 0; i < len; ++i) slots[i] = i;
  for (uint32_t i = 0; i < blocks; ++i) table[i] = int32_t(i);
  std::vector<bf16_bits> key(uint64_t{len} * row), q(uint64_t{q_heads} * dim);
  for (auto& x : key) x = sparkrt::numeric::f32_to_bf16(float(normal(gen)));
  for (auto& x : q) x = sparkrt::numeric::f32_to_bf16(float(0.3 * normal(gen)));
  for (bool outliers : {false, true}) {
    // Outliers: 4 channels of every head 20 times larger, as activations have.
    std::vector<bf16_bits> v(uint64_t{len} * row);
    for (uint64_t i = 0; i < v.size(); ++i) {
      const bool big = outliers && (i % dim) % 32 == 5;
      v[i] = sparkrt::numeric::f32_to_bf16(float(normal(gen) * (big ? 20.0 : 1.0)));
    }
    // The exact output over the original V, per query head.
    std::vector<double> exact(uint64_t{q_heads} * dim);
    for (uint32_t h = 0; h < q_heads; ++h) {
      std::vector<double> qh(dim);
      for (uint32_t j = 0; j < dim; ++j) qh[j] = bf16_value(q[h * dim + j]);
      const uint32_t kvh = h / (q_heads / kv_heads);
      const auto o = verify::attention(
          qh, len, dim, 1 / std::sqrt(double(dim)),
          [&](uint32_t t, uint32_t j) { return bf16_value(key[uint64_t{t} * row + kvh * dim + j]); },
          [&](uint32_t t, uint32_t j) { return bf16_value(v[uint64_t{t} * row + kvh * dim + j]); });
      std::copy(o.begin(), o.end(), exact.begin() + uint64_t{h} * dim);
    }
    for (uint32_t bits : {2u, 3u, 4u}) {
      double err[2];
      for (bool rotate : {false, true}) {
        const Shape s{bits, kv_heads, dim, block, blocks};
        Buffer kb(*dev, key), vb(*dev, v), sb(*dev, slots), qb(*dev, q), tb(*dev, table);
        Buffer lb(*dev, std::vector<int32_t>{int32_t(len)}), out(*dev, uint64_t{q_heads} * dim * 2);
        if (rotate)
          REQUIRE_OK(ops::hadamard_transform_bf16(*dev, wk, {.in = vb, .out = vb, .num_tokens = len,
                                                             .num_heads = kv_heads, .head_dim = dim,
                                                             .in_stride = row, .out_stride = row}));
        Cache c(*dev, s);
        REQUIRE_OK(write(*dev, wk, c, kb, vb, sb, len, row, row));
        const ops::PagedDecodeAttnTurboArgs a{
            .q = qb, .k_cache = c.kc, .v_cache = c.vc, .out = out, .block_tables = tb,
            .seq_lens = lb, .max_blocks_per_seq = blocks, .num_seqs = 1, .num_q_heads = q_heads,
            .num_kv_heads = kv_heads, .head_dim = dim, .block_size = block,
            .inv_sqrt_d = float(1 / std::sqrt(double(dim))), .q_stride = q_heads * dim,
            .v_block_stride_bytes = s.v_block(), .v_data_section_bytes = s.v_data()};
        REQUIRE_OK(bits == 2   ? ops::paged_decode_attn_bf16k_turbo2v(*dev, dk, a)
                   : bits == 3 ? ops::paged_decode_attn_bf16k_turbo3v(*dev, dk, a)
                               : ops::paged_decode_attn_bf16k_turbo4v(*dev, dk, a));
        if (rotate)
          REQUIRE_OK(ops::hadamard_transform_bf16(*dev, wk, {.in = out, .out = out, .num_tokens = 1,
                                                             .num_heads = q_heads, .head_dim = dim,
                                                             .in_stride = q_heads * dim,
                                                             .out_stride = q_heads * dim}));
        const auto got = out.download<bf16_bits>();
        double num = 0, den = 0;
        for (size_t i = 0; i < exact.size(); ++i) {
          num += (bf16_value(got[i]) - exact[i]) * (bf16_value(got[i]) - exact[i]);
          den += exact[i] * exact[i];
        }
        err[rotate] = std::sqrt(num / den);
      }
      MESSAGE(std::string(outliers ? "outlier" : "Gaussian") << " V, " << bits
                                                 << "-bit: relative RMS error of the output "
                                                 << err[0] << " without the rotation, " << err[1]
                                                 << " with it");
      // Fewer bits, more error; the rotation pays where channels are outliers.
      CHECK(err[1] < (bits == 2 ? 0.45 : bits == 3 ? 0.2 : 0.1));
      if (outliers) CHECK(err[1] < 0.8 * err[0]);
    }
  }
}
