// The kv_cache ops on the cpu reference backend against float64 computed
// from the contracts in docs/kernels.md (sparkrt/verify): random non-zero
// inputs, outputs poisoned first (so an element written that should not be,
// or not written that should be, shows), several shapes, negative slots.
// Tolerances are the ones docs/kernels.md states (sparkrt/verify/tolerances.h).
#include <algorithm>
#include <cmath>
#include <cstdint>
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

constexpr bf16_bits kPoisonBf16 = 0xffff;  // memset 0xff: a NaN
constexpr fp8_bits kPoisonFp8 = 0xff;      // a NaN

// A paged pool and where an element of it lives (the NHD layout).
struct Pool {
  uint32_t num_blocks;
  uint32_t block_size;
  uint32_t heads;
  uint32_t dim;
  uint64_t block_stride;  // elements

  uint64_t elems() const { return uint64_t{num_blocks} * block_stride; }
  uint64_t at(int64_t slot, uint32_t h, uint32_t d) const {
    return uint64_t(slot / block_size) * block_stride +
           (uint64_t(slot % block_size) * heads + h) * dim + d;
  }
};

Pool dense_pool(uint32_t num_blocks, uint32_t block_size, uint32_t heads, uint32_t dim) {
  return {num_blocks, block_size, heads, dim, uint64_t{block_size} * heads * dim};
}

// Distinct random slots of the pool for `n` tokens; every fourth token is
// padding (a negative slot).
std::vector<int64_t> random_slots(std::mt19937_64& gen, uint32_t n, const Pool& pool) {
  std::vector<int64_t> all(uint64_t{pool.num_blocks} * pool.block_size);
  for (size_t i = 0; i < all.size(); ++i) all[i] = int64_t(i);
  std::shuffle(all.begin(), all.end(), gen);
  REQUIRE(all.size() >= n);
  std::vector<int64_t> slots(all.begin(), all.begin() + n);
  std::uniform_int_distribution<int64_t> neg(-1000, -1);
  for (uint32_t t = 1; t < n; t += 4) slots[t] = neg(gen);
  return slots;
}

// The fused K path in float64 (sparkrt/verify/float64.h) of token t, head h:
// pair i turning by positions[i % npos].
std::vector<double> k_path_f64(const std::vector<bf16_bits>& k_in,
                               const std::vector<bf16_bits>& weight, const int32_t* const pos[3],
                               int npos, uint32_t t, uint32_t h, uint32_t heads, uint32_t dim,
                               uint32_t rotary, double eps, double theta) {
  std::vector<double> x(dim), w(dim);
  for (uint32_t d = 0; d < dim; ++d) {
    x[d] = bf16_value(k_in[(uint64_t{t} * heads + h) * dim + d]);
    w[d] = bf16_value(weight[d]);
  }
  return verify::k_norm_rope(x, w, eps, rotary, theta,
                             [&](uint32_t i) { return double(pos[npos == 1 ? 0 : i % 3][t]); });
}

// The largest magnitude of a head: the scale of the K path's bounds.
double head_max(const std::vector<double>& y) {
  double m = 0;
  for (double v : y) m = std::max(m, std::fabs(v));
  return m;
}

}  // namespace

TEST_CASE("ops cpu: fill_slots_from_block_table") {
  auto dev = open_device("cpu");
  const auto k = resolve<ops::KvCacheKernels>(*dev);
  const uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  std::mt19937_64 gen(seed);
  for (uint32_t block_size : {16u, 32u}) {
    CAPTURE(block_size);
    const std::vector<int32_t> table = shuffled_blocks(gen, 40);
    const uint32_t start = std::uniform_int_distribution<uint32_t>(0, 100)(gen);
    const uint32_t count = 40 * block_size - start - 3;  // spans several CTAs of 256
    Buffer dtable(*dev, table);
    Buffer dslots(*dev, (count + 1) * sizeof(int64_t));
    dslots.poison();
    REQUIRE_OK(ops::fill_slots_from_block_table(
        *dev, k,
        {.slots = dslots, .block_table = dtable, .start_pos = start, .count = count,
         .block_size = block_size}));
    const auto slots = dslots.download<int64_t>();
    for (uint32_t i = 0; i < count; ++i) {
      const uint32_t pos = start + i;
      const int64_t expected = int64_t{table[pos / block_size]} * block_size + pos % block_size;
      if (slots[i] != expected) FAIL_CHECK("slot ", i, ": ", slots[i], " != ", expected);
    }
    CHECK(slots[count] == -1);  // one past the end: untouched poison
  }
}

TEST_CASE("ops cpu: reshape_and_cache copies rows into slots exactly") {
  auto dev = open_device("cpu");
  const auto k = resolve<ops::KvCacheKernels>(*dev);
  const uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  std::mt19937_64 gen(seed);
  for (uint32_t dim : {64u, 128u, 256u}) {
    for (uint32_t block_size : {16u, 32u}) {
      CAPTURE(dim);
      CAPTURE(block_size);
      const uint32_t heads = dim == 256 ? 1 : 4, tokens = 37;
      const Pool pool = dense_pool(5, block_size, heads, dim);
      const uint32_t row = heads * dim;
      const uint32_t key_stride = row + 24, value_stride = 3 * row;  // padded / fused QKV
      const auto key = random_bf16(gen, uint64_t{tokens} * key_stride);
      const auto value = random_bf16(gen, uint64_t{tokens} * value_stride);
      const auto slots = random_slots(gen, tokens, pool);
      Buffer dkey(*dev, key), dvalue(*dev, value), dslots(*dev, slots);
      Buffer dk(*dev, pool.elems() * 2), dv(*dev, pool.elems() * 2);
      dk.poison();
      dv.poison();
      REQUIRE_OK(ops::reshape_and_cache(*dev, k,
                                        {.key = dkey,
                                         .value = dvalue,
                                         .k_cache = dk,
                                         .v_cache = dv,
                                         .slot_mapping = dslots,
                                         .num_tokens = tokens,
                                         .num_kv_heads = heads,
                                         .head_dim = dim,
                                         .block_size = block_size,
                                         .key_stride = key_stride,
                                         .value_stride = value_stride}));
      std::vector<bf16_bits> ek(pool.elems(), kPoisonBf16), ev(pool.elems(), kPoisonBf16);
      for (uint32_t t = 0; t < tokens; ++t) {
        if (slots[t] < 0) continue;
        for (uint32_t h = 0; h < heads; ++h)
          for (uint32_t d = 0; d < dim; ++d) {
            ek[pool.at(slots[t], h, d)] = key[uint64_t{t} * key_stride + h * dim + d];
            ev[pool.at(slots[t], h, d)] = value[uint64_t{t} * value_stride + h * dim + d];
          }
      }
      CHECK((dk.download<bf16_bits>() == ek));
      CHECK((dv.download<bf16_bits>() == ev));
    }
  }
}

TEST_CASE("ops cpu: reshape_and_cache_flash_v_only writes the value cache only") {
  auto dev = open_device("cpu");
  const auto k = resolve<ops::KvCacheKernels>(*dev);
  const uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  std::mt19937_64 gen(seed);
  const uint32_t heads = 2, dim = 128, tokens = 21, block_size = 16;
  const Pool pool = dense_pool(3, block_size, heads, dim);
  const uint32_t value_stride = heads * dim + 8;
  const auto value = random_bf16(gen, uint64_t{tokens} * value_stride);
  const auto slots = random_slots(gen, tokens, pool);
  Buffer dvalue(*dev, value), dslots(*dev, slots), dv(*dev, pool.elems() * 2);
  dv.poison();
  REQUIRE_OK(ops::reshape_and_cache_flash_v_only(*dev, k,
                                                 {.value = dvalue,
                                                  .v_cache = dv,
                                                  .slot_mapping = dslots,
                                                  .num_tokens = tokens,
                                                  .num_kv_heads = heads,
                                                  .head_dim = dim,
                                                  .block_size = block_size,
                                                  .value_stride = value_stride}));
  std::vector<bf16_bits> ev(pool.elems(), kPoisonBf16);
  for (uint32_t t = 0; t < tokens; ++t) {
    if (slots[t] < 0) continue;
    for (uint32_t e = 0; e < heads * dim; ++e)
      ev[pool.at(slots[t], 0, 0) + e] = value[uint64_t{t} * value_stride + e];
  }
  CHECK((dv.download<bf16_bits>() == ev));
}

TEST_CASE("ops cpu: reshape_and_cache_fp8 quantises with saturation into a padded pool") {
  auto dev = open_device("cpu");
  const auto k = resolve<ops::KvCacheKernels>(*dev);
  const uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  std::mt19937_64 gen(seed);
  for (uint32_t dim : {64u, 128u, 256u}) {
    CAPTURE(dim);
    const uint32_t heads = 2, tokens = 29, block_size = 16;
    Pool pool = dense_pool(4, block_size, heads, dim);
    pool.block_stride += 96;  // padding between blocks stays untouched
    const uint32_t row = heads * dim;
    // |key| / k_scale reaches past 448 (saturation); |value| / v_scale reaches
    // down into the subnormals and below.
    const float k_scale = 1.0f / 128, v_scale = 4.0f;
    const auto key = random_bf16(gen, uint64_t{tokens} * row, 0.05f, 4.0f);
    const auto value = random_bf16(gen, uint64_t{tokens} * row, 0.001f, 4.0f);
    const auto slots = random_slots(gen, tokens, pool);
    Buffer dkey(*dev, key), dvalue(*dev, value), dslots(*dev, slots);
    Buffer dk(*dev, pool.elems()), dv(*dev, pool.elems());
    dk.poison();
    dv.poison();
    REQUIRE_OK(ops::reshape_and_cache_fp8(*dev, k,
                                          {.key = dkey,
                                           .value = dvalue,
                                           .k_cache = dk,
                                           .v_cache = dv,
                                           .slot_mapping = dslots,
                                           .num_tokens = tokens,
                                           .num_kv_heads = heads,
                                           .head_dim = dim,
                                           .block_size = block_size,
                                           .k_scale = k_scale,
                                           .v_scale = v_scale,
                                           .key_stride = row,
                                           .value_stride = row,
                                           .cache_stride = pool.block_stride}));
    const auto gk = dk.download<fp8_bits>();
    const auto gv = dv.download<fp8_bits>();
    std::vector<bool> written(pool.elems(), false);
    uint64_t saturated = 0, bad = 0;
    const auto check = [&](fp8_bits got, double exact) {
      if (std::fabs(exact) > 448.0) {
        ++saturated;
        return got == (exact < 0 ? 0xfe : 0x7e);
      }
      // Nearest even in float64; the f32 division may move a tie.
      return std::fabs(fp8_value(got) - exact) <=
                 0.5 * fp8_ulp(exact) + vs_float64::kFp8DivisionRel * std::fabs(exact) &&
             (got & 0x7f) != 0x7f;
    };
    for (uint32_t t = 0; t < tokens; ++t) {
      if (slots[t] < 0) continue;
      for (uint32_t e = 0; e < row; ++e) {
        const uint64_t at = pool.at(slots[t], 0, 0) + e;
        written[at] = true;
        const double ek = bf16_value(key[uint64_t{t} * row + e]) / k_scale;
        const double ev = bf16_value(value[uint64_t{t} * row + e]) / v_scale;
        if (!check(gk[at], ek) && bad++ < 8) FAIL_CHECK("k ", ek, " stored as ", int(gk[at]));
        if (!check(gv[at], ev) && bad++ < 8) FAIL_CHECK("v ", ev, " stored as ", int(gv[at]));
      }
    }
    CHECK(bad == 0);
    CHECK(saturated > 0);  // the case was exercised
    for (uint64_t i = 0; i < pool.elems(); ++i) {
      if (!written[i] && (gk[i] != kPoisonFp8 || gv[i] != kPoisonFp8)) {
        FAIL_CHECK("element ", i, " was written but belongs to no token");
        break;
      }
    }
  }
}

TEST_CASE("ops cpu: fused K path (bf16) equals RMSNorm then RoPE in float64, rounded once") {
  auto dev = open_device("cpu");
  const auto k = resolve<ops::KvCacheKernels>(*dev);
  const uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<int32_t> position(0, 4095);
  for (uint32_t dim : {64u, 128u, 256u}) {
    for (uint32_t rotary : {dim, dim / 2}) {
      for (uint32_t block_size : {16u, 32u}) {
        CAPTURE(dim);
        CAPTURE(rotary);
        CAPTURE(block_size);
        const uint32_t heads = 2, tokens = 11;
        const float eps = 1e-6f, theta = rotary == dim ? 10000.0f : 1e6f;
        const Pool pool = dense_pool(2, block_size, heads, dim);
        const auto k_in = random_bf16(gen, uint64_t{tokens} * heads * dim);
        const auto weight = random_bf16(gen, dim, 0.5f, 1.5f);
        std::vector<int32_t> positions(tokens);
        for (auto& p : positions) p = position(gen);
        const auto slots = random_slots(gen, tokens, pool);
        Buffer dk_in(*dev, k_in), dw(*dev, weight), dpos(*dev, positions), dslots(*dev, slots);
        Buffer dk(*dev, pool.elems() * 2);
        dk.poison();
        REQUIRE_OK(ops::fused_k_norm_rope_cache_write_bf16(*dev, k,
                                                           {.k_in = dk_in,
                                                            .k_norm_weight = dw,
                                                            .positions = dpos,
                                                            .k_cache = dk,
                                                            .slot_mapping = dslots,
                                                            .num_tokens = tokens,
                                                            .num_kv_heads = heads,
                                                            .head_dim = dim,
                                                            .rotary_dim = rotary,
                                                            .block_size = block_size,
                                                            .rms_eps = eps,
                                                            .theta = theta}));
        const auto got = dk.download<bf16_bits>();
        std::vector<bool> written(pool.elems(), false);
        const int32_t* pos[3] = {positions.data(), nullptr, nullptr};
        uint64_t bad = 0;
        for (uint32_t t = 0; t < tokens; ++t) {
          if (slots[t] < 0) continue;
          for (uint32_t h = 0; h < heads; ++h) {
            const auto y = k_path_f64(k_in, weight, pos, 1, t, h, heads, dim, rotary, eps, theta);
            const double scale = head_max(y);
            for (uint32_t d = 0; d < dim; ++d) {
              const uint64_t at = pool.at(slots[t], h, d);
              written[at] = true;
              const double g = bf16_value(got[at]);
              if (!(std::fabs(g - y[d]) <= vs_float64::kKNormRopeBf16(y[d], scale)) && bad++ < 8)
                FAIL_CHECK("t ", t, " h ", h, " d ", d, ": got ", g, ", float64 ", y[d]);
            }
          }
        }
        CHECK(bad == 0);
        for (uint64_t i = 0; i < pool.elems(); ++i)
          if (!written[i] && got[i] != kPoisonBf16) {
            FAIL_CHECK("element ", i, " was written but belongs to no token");
            break;
          }
      }
    }
  }
}

TEST_CASE("ops cpu: MRoPE with equal positions equals the scalar variant bit for bit") {
  auto dev = open_device("cpu");
  const auto k = resolve<ops::KvCacheKernels>(*dev);
  const uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<int32_t> position(0, 100000);
  for (uint32_t dim : {64u, 128u, 256u}) {
    CAPTURE(dim);
    const uint32_t heads = 4, tokens = 13, block_size = 16, rotary = dim;
    const Pool pool = dense_pool(2, block_size, heads, dim);
    const auto k_in = random_bf16(gen, uint64_t{tokens} * heads * dim);
    const auto weight = random_bf16(gen, dim, 0.5f, 1.5f);
    std::vector<int32_t> positions(tokens);
    for (auto& p : positions) p = position(gen);
    const auto slots = random_slots(gen, tokens, pool);
    Buffer dk_in(*dev, k_in), dw(*dev, weight), dpos(*dev, positions), dslots(*dev, slots);
    Buffer scalar(*dev, pool.elems() * 2), mrope(*dev, pool.elems() * 2);
    scalar.poison();
    mrope.poison(0x5a);  // a different poison: untouched elements must differ
    REQUIRE_OK(ops::fused_k_norm_rope_cache_write_bf16(
        *dev, k,
        {.k_in = dk_in, .k_norm_weight = dw, .positions = dpos, .k_cache = scalar,
         .slot_mapping = dslots, .num_tokens = tokens, .num_kv_heads = heads, .head_dim = dim,
         .rotary_dim = rotary, .block_size = block_size, .rms_eps = 1e-5f, .theta = 1e6f}));
    REQUIRE_OK(ops::fused_k_norm_rope_cache_write_bf16_mrope(
        *dev, k,
        {.k_in = dk_in, .k_norm_weight = dw, .pos_t = dpos, .pos_h = dpos, .pos_w = dpos,
         .k_cache = mrope, .slot_mapping = dslots, .num_tokens = tokens, .num_kv_heads = heads,
         .head_dim = dim, .rotary_dim = rotary, .block_size = block_size, .rms_eps = 1e-5f,
         .theta = 1e6f}));
    const auto a = scalar.download<bf16_bits>();
    const auto b = mrope.download<bf16_bits>();
    uint64_t written = 0, mismatches = 0;
    for (uint32_t t = 0; t < tokens; ++t) {
      if (slots[t] < 0) continue;
      for (uint32_t e = 0; e < heads * dim; ++e) {
        const uint64_t at = pool.at(slots[t], 0, 0) + e;
        ++written;
        if (a[at] != b[at]) ++mismatches;
      }
    }
    CHECK(written > 0);
    CHECK(mismatches == 0);
  }
}

TEST_CASE("ops cpu: MRoPE picks pos_t, pos_h, pos_w by pair index mod 3") {
  auto dev = open_device("cpu");
  const auto k = resolve<ops::KvCacheKernels>(*dev);
  const uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<int32_t> position(0, 2047);
  const uint32_t heads = 2, tokens = 7, block_size = 32, dim = 128, rotary = 96;
  const Pool pool = dense_pool(1, block_size, heads, dim);
  const auto k_in = random_bf16(gen, uint64_t{tokens} * heads * dim);
  const auto weight = random_bf16(gen, dim, 0.5f, 1.5f);
  std::vector<int32_t> p[3];
  for (auto& v : p) {
    v.resize(tokens);
    for (auto& x : v) x = position(gen);
  }
  const auto slots = random_slots(gen, tokens, pool);
  Buffer dk_in(*dev, k_in), dw(*dev, weight), dt(*dev, p[0]), dh(*dev, p[1]), dwp(*dev, p[2]);
  Buffer dslots(*dev, slots), dk(*dev, pool.elems() * 2);
  dk.poison();
  REQUIRE_OK(ops::fused_k_norm_rope_cache_write_bf16_mrope(
      *dev, k,
      {.k_in = dk_in, .k_norm_weight = dw, .pos_t = dt, .pos_h = dh, .pos_w = dwp, .k_cache = dk,
       .slot_mapping = dslots, .num_tokens = tokens, .num_kv_heads = heads, .head_dim = dim,
       .rotary_dim = rotary, .block_size = block_size, .rms_eps = 1e-6f, .theta = 10000.0f}));
  const auto got = dk.download<bf16_bits>();
  const int32_t* pos[3] = {p[0].data(), p[1].data(), p[2].data()};
  uint64_t bad = 0;
  for (uint32_t t = 0; t < tokens; ++t) {
    if (slots[t] < 0) continue;
    for (uint32_t h = 0; h < heads; ++h) {
      const auto y = k_path_f64(k_in, weight, pos, 3, t, h, heads, dim, rotary, 1e-6, 10000.0);
      const double scale = head_max(y);
      for (uint32_t d = 0; d < dim; ++d) {
        const double g = bf16_value(got[pool.at(slots[t], h, d)]);
        if (!(std::fabs(g - y[d]) <= vs_float64::kKNormRopeBf16(y[d], scale)) && bad++ < 8)
          FAIL_CHECK("t ", t, " h ", h, " d ", d, ": got ", g, ", float64 ", y[d]);
      }
    }
  }
  CHECK(bad == 0);
}

TEST_CASE("ops cpu: fused K path (fp8) scales and saturates after one f32 pipeline") {
  auto dev = open_device("cpu");
  const auto k = resolve<ops::KvCacheKernels>(*dev);
  const uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<int32_t> position(0, 4095);
  for (uint32_t dim : {64u, 128u, 256u}) {
    CAPTURE(dim);
    const uint32_t heads = 2, tokens = 9, block_size = 16, rotary = dim;
    const float inv_scale = 300.0f;  // the largest |y| (~2.5) lands beyond 448
    const Pool pool = dense_pool(2, block_size, heads, dim);
    const auto k_in = random_bf16(gen, uint64_t{tokens} * heads * dim);
    const auto weight = random_bf16(gen, dim, 0.5f, 1.5f);
    std::vector<int32_t> positions(tokens);
    for (auto& x : positions) x = position(gen);
    const auto slots = random_slots(gen, tokens, pool);
    Buffer dk_in(*dev, k_in), dw(*dev, weight), dpos(*dev, positions), dslots(*dev, slots);
    Buffer dk(*dev, pool.elems());
    dk.poison();
    REQUIRE_OK(ops::fused_k_norm_rope_cache_write_fp8(
        *dev, k,
        {.k_in = dk_in, .k_norm_weight = dw, .positions = dpos, .k_cache = dk,
         .slot_mapping = dslots, .num_tokens = tokens, .num_kv_heads = heads, .head_dim = dim,
         .rotary_dim = rotary, .block_size = block_size, .rms_eps = 1e-6f, .theta = 10000.0f,
         .inv_scale = inv_scale}));
    const auto got = dk.download<fp8_bits>();
    const int32_t* pos[3] = {positions.data(), nullptr, nullptr};
    uint64_t bad = 0, saturated = 0;
    for (uint32_t t = 0; t < tokens; ++t) {
      if (slots[t] < 0) continue;
      for (uint32_t h = 0; h < heads; ++h) {
        const auto y = k_path_f64(k_in, weight, pos, 1, t, h, heads, dim, rotary, 1e-6, 10000.0);
        const double atol = vs_float64::kKNormRopeFp8Abs * inv_scale * head_max(y);
        for (uint32_t d = 0; d < dim; ++d) {
          const fp8_bits g = got[pool.at(slots[t], h, d)];
          const double e = y[d] * inv_scale;
          bool ok;
          if (std::fabs(e) - atol > 448.0) {
            ++saturated;
            ok = g == (e < 0 ? 0xfe : 0x7e);
          } else {
            const double clamped = std::clamp(e, -448.0, 448.0);
            ok = (g & 0x7f) != 0x7f &&
                 std::fabs(fp8_value(g) - clamped) <= 0.5 * fp8_ulp(clamped) + atol;
          }
          if (!ok && bad++ < 8)
            FAIL_CHECK("t ", t, " h ", h, " d ", d, ": stored ", fp8_value(g), ", float64 ", e);
        }
      }
    }
    CHECK(bad == 0);
    CHECK(saturated > 0);
  }
}

TEST_CASE("ops cpu: undersized buffers are errors naming the operand") {
  auto dev = open_device("cpu");
  const auto k = resolve<ops::KvCacheKernels>(*dev);
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed << " (replay: --set-env=SPARKRT_TEST_SEED=" << seed << ")");
  std::mt19937_64 gen(seed);
  const uint32_t heads = 2, dim = 64, tokens = 8, block_size = 16;
  const Pool pool = dense_pool(1, block_size, heads, dim);
  const auto key = random_bf16(gen, uint64_t{tokens} * heads * dim);
  std::vector<int64_t> slots(tokens);
  for (uint32_t t = 0; t < tokens; ++t) slots[t] = t * 2;  // the last one is slot 14
  Buffer dkey(*dev, key), dslots(*dev, slots);
  const auto run = [&](sparkrt::DevicePtr key_ptr, sparkrt::DevicePtr slot_ptr,
                       sparkrt::DevicePtr k_cache) {
    return ops::reshape_and_cache(*dev, k,
                                  {.key = key_ptr,
                                   .value = key_ptr,
                                   .k_cache = k_cache,
                                   .v_cache = k_cache,
                                   .slot_mapping = slot_ptr,
                                   .num_tokens = tokens,
                                   .num_kv_heads = heads,
                                   .head_dim = dim,
                                   .block_size = block_size,
                                   .key_stride = heads * dim,
                                   .value_stride = heads * dim});
  };
  {
    // Slot 14's row ends at (14 + 1) * 128 elements; one block is 16 * 128.
    Buffer short_cache(*dev, 15 * heads * dim * 2 - 2);
    const absl::Status s = run(dkey, dslots, short_cache);
    INFO(s.ToString());
    CHECK_FALSE(s.ok());
    CHECK(contains(s, "k_cache"));
    CHECK(contains(s, "reshape_and_cache"));
    Buffer exact_cache(*dev, 15 * heads * dim * 2);
    CHECK_OK(run(dkey, dslots, exact_cache));
  }
  {
    Buffer cache(*dev, pool.elems() * 2);
    Buffer short_slots(*dev, (tokens - 1) * sizeof(int64_t));
    const absl::Status s = run(dkey, short_slots, cache);
    INFO(s.ToString());
    CHECK_FALSE(s.ok());
    CHECK(contains(s, "slot_mapping"));
    Buffer short_key(*dev, key.size() * 2 - 2);
    const absl::Status s2 = run(short_key, dslots, cache);
    INFO(s2.ToString());
    CHECK_FALSE(s2.ok());
    CHECK(contains(s2, "key"));
  }
  {
    // fused path: k_in one token short.
    Buffer cache(*dev, pool.elems() * 2);
    Buffer short_k(*dev, (uint64_t{tokens} - 1) * heads * dim * 2);
    const auto weight = random_bf16(gen, dim);
    std::vector<int32_t> positions(tokens, 3);
    Buffer dw(*dev, weight), dpos(*dev, positions);
    const absl::Status s = ops::fused_k_norm_rope_cache_write_bf16(
        *dev, k,
        {.k_in = short_k, .k_norm_weight = dw, .positions = dpos, .k_cache = cache,
         .slot_mapping = dslots, .num_tokens = tokens, .num_kv_heads = heads, .head_dim = dim,
         .rotary_dim = dim, .block_size = block_size});
    INFO(s.ToString());
    CHECK_FALSE(s.ok());
    CHECK(contains(s, "k_in"));
  }
}
